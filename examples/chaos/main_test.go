package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseFaults(t *testing.T) {
	tests := []struct {
		give    string
		want    []string
		wantErr bool
	}{
		{give: "leader,partition", want: []string{"leader", "partition"}},
		{give: " kill , rolling,", want: []string{"kill", "rolling"}},
		{give: "leader,nope", wantErr: true},
		{give: ",", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseFaults(tt.give)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseFaults(%q) error = %v, want error %v", tt.give, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && !equal(got, tt.want) {
			t.Errorf("parseFaults(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
