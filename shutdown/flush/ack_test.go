package flush_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/shutdown/flush"
)

// Issue 8, case 13: a flush whose content type is not JSON is refused with
// 415, before its body is read.
func TestAFlushWhoseContentTypeIsNotJSONIsRefusedWith415(t *testing.T) {
	tests := []struct {
		name string
		give string // Content-Type; "-" for none
		big  bool   // a body over MaxBodyBytes: 413 if it were read
		want int
	}{
		{name: "text/plain is refused", give: "text/plain", want: http.StatusUnsupportedMediaType},
		{name: "a form is refused", give: "application/x-www-form-urlencoded", want: http.StatusUnsupportedMediaType},
		{name: "no content type is refused", give: "-", want: http.StatusUnsupportedMediaType},
		{name: "a malformed content type is refused", give: "application/json; =", want: http.StatusUnsupportedMediaType},
		{name: "an oversized text body is refused before it is read", give: "text/plain", big: true, want: http.StatusUnsupportedMediaType},
		{name: "JSON with parameters is accepted", give: "application/json; charset=utf-8", want: http.StatusOK},
		{name: "JSON in capitals is accepted", give: "Application/JSON", want: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw, ev := newGateway(t)
			inst := self
			if tt.big {
				inst.ID = strings.Repeat("x", 2*flush.DefaultMaxBodyBytes)
			}
			req := signedRequest(t, gw.URL, secret, inst, time.Now())
			if tt.give == "-" {
				req.Header.Del("Content-Type")
			} else {
				req.Header.Set("Content-Type", tt.give)
			}
			if code := testutil.Do(t, req).StatusCode; code != tt.want {
				t.Errorf("status %d, want %d", code, tt.want)
			}
			if tt.want != http.StatusOK && ev.count() != 0 {
				t.Errorf("evicted %d times, want none", ev.count())
			}
		})
	}
}

// Issue 8, case 14: a gateway that does not route the stopping service
// acknowledges its flush: the Notifier reports no error.
func TestAGatewayThatDoesNotRouteTheServiceAcknowledgesItsFlush(t *testing.T) {
	srv, url := unstarted(t)
	h, err := flush.NewHandler(secret, []string{url + "/flush"}, flush.EvicterMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	srv.Start()
	n := newNotifier(t, flush.StaticTargets(url+"/flush"), flush.RetryMax(0))
	reports, err := n.Flush(context.Background())
	if err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if r := reports[0]; !r.Acked || r.Result != flush.NotRouted || r.Attempts != 1 {
		t.Fatalf("report %+v, want acked as not routed at the first attempt", r)
	}
}
