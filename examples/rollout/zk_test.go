package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestCheckOwnPath(t *testing.T) {
	base := basePathPrefix + "0123abcd"
	for _, p := range []string{base, base + "/quote", base + "/quote/quote-1"} {
		if err := checkOwnPath(base, p); err != nil {
			t.Errorf("checkOwnPath(%q, %q): %v", base, p, err)
		}
	}
	for _, tc := range []struct{ base, p string }{
		{"/services", "/services/quote/quote-1"},
		{base, "/services/quote/quote-1"},
		{base, base + "x/quote"},
		{base, base + "/../services"},
		{base, base + "/quote/"},
		{basePathPrefix, basePathPrefix + "/quote"},
		{base + "/x", base + "/x/quote"},
		{"/", "/services"},
	} {
		if err := checkOwnPath(tc.base, tc.p); err == nil {
			t.Errorf("checkOwnPath(%q, %q) accepted", tc.base, tc.p)
		}
	}
	// The guards run before any connection is tried.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := deleteNodes(ctx, "127.0.0.1:1", nil, base, "/services/quote/quote-1"); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("deleteNodes outside the base path: %v", err)
	}
	if err := deleteTree(ctx, "127.0.0.1:1", nil, "/services"); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("deleteTree(/services): %v", err)
	}
}
