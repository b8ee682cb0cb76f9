package main

import "testing"

// The migrate scenario's go-kit consumer takes go-kit's instance strings
// and refuses the Curator JSON a gracekit provider's node holds beside its
// twin, as a factory written from go-kit's examples does.
func TestHostPortFactoryTakesOnlyInstanceStrings(t *testing.T) {
	f := hostPortFactory(quoteRoute)
	if _, _, err := f("127.0.0.1:8080"); err != nil {
		t.Errorf("host:port refused: %v", err)
	}
	for _, give := range []string{
		`{"name":"quote-gokit","id":"quote-gokit-1","address":"127.0.0.1","port":8080}`,
		"http://127.0.0.1:8080",
		"",
	} {
		if _, _, err := f(give); err == nil {
			t.Errorf("%q taken as an instance", give)
		}
	}
}
