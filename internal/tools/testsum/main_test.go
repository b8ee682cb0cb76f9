package main

import (
	"bytes"
	"strings"
	"testing"
)

// A failed subtest's lines are printed, a passed test's are not, and the
// summary names the failure, the slowest tests and the counts.
func TestAFailedTestIsShownNamedAndCounted(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"p"}`,
		`{"Action":"run","Package":"p","Test":"TestOK"}`,
		`{"Action":"output","Package":"p","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"output","Package":"p","Test":"TestOK","Output":"    ok_test.go:3: hidden\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestOK","Elapsed":2.5}`,
		`{"Action":"run","Package":"p","Test":"TestBad/sub"}`,
		`{"Action":"output","Package":"p","Test":"TestBad/sub","Output":"    bad_test.go:9: boom\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestBad/sub","Elapsed":0.1}`,
		`{"Action":"fail","Package":"p","Test":"TestBad","Elapsed":0.2}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t2.8s\n"}`,
		`{"Action":"fail","Package":"p","Elapsed":2.8}`,
	}, "\n")
	var lines, out bytes.Buffer
	if rc := run(strings.NewReader(in), &lines, &out, 10, "tests"); rc != 1 {
		t.Errorf("exit code %d, want 1", rc)
	}
	if got := lines.String(); !strings.Contains(got, "boom") || strings.Contains(got, "hidden") || !strings.Contains(got, "FAIL\tp") {
		t.Errorf("lines:\n%s", got)
	}
	for _, want := range []string{"FAILED: p TestBad/sub\n", "2.5s  p TestOK\n", "tests: 1 passed, 2 failed\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// A package that never reported its result (its binary died, or go test
// was killed) fails the run, and the running test's lines are shown.
func TestAPackageWithoutAResultFails(t *testing.T) {
	in := `{"Action":"run","Package":"p","Test":"TestHang"}
{"Action":"output","Package":"p","Test":"TestHang","Output":"panic: test timed out after 20m0s\n"}`
	var lines, out bytes.Buffer
	if rc := run(strings.NewReader(in), &lines, &out, 10, "tests"); rc != 1 {
		t.Errorf("exit code %d, want 1", rc)
	}
	if !strings.Contains(lines.String(), "UNFINISHED: p TestHang") || !strings.Contains(lines.String(), "timed out") {
		t.Errorf("lines:\n%s", lines.String())
	}
}

// A run where everything passed exits 0.
func TestAllPassedExitsZero(t *testing.T) {
	in := `{"Action":"run","Package":"p","Test":"TestOK"}
{"Action":"pass","Package":"p","Test":"TestOK","Elapsed":0.1}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}
{"Action":"pass","Package":"p","Elapsed":0.1}`
	var lines, out bytes.Buffer
	if rc := run(strings.NewReader(in), &lines, &out, 10, "tests"); rc != 0 {
		t.Errorf("exit code %d, want 0; %s", rc, out.String())
	}
	if !strings.Contains(lines.String(), "ok  \tp") || !strings.Contains(out.String(), "tests: 1 passed, 0 failed") {
		t.Errorf("lines %q, summary %q", lines.String(), out.String())
	}
}
