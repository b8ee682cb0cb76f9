package flush_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracekit/gracekit/internal/testutil"
	"github.com/gracekit/gracekit/shutdown/flush"
)

func newNotifier(t *testing.T, opts ...flush.NotifierOption) *flush.Notifier {
	t.Helper()
	n, err := flush.NewNotifier(self, secret, append([]flush.NotifierOption{registration}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNotifierFlushesEveryTarget(t *testing.T) {
	gw1, ev1 := newGateway(t)
	gw2, ev2 := newGateway(t)
	n := newNotifier(t,
		flush.StaticTargets(gw1.URL+"/flush"),
		flush.Targets(flush.TargetSourceFunc(func() []string {
			return []string{gw2.URL + "/flush", gw1.URL + "/flush"} // gw1 again: called once
		})),
	)
	reports, err := n.Flush(context.Background())
	if err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if len(reports) != 2 {
		t.Fatalf("got %d reports, want 2: %+v", len(reports), reports)
	}
	for _, r := range reports {
		if !r.Acked || r.Attempts != 1 || r.Err != nil {
			t.Errorf("report %+v, want acked at the first attempt", r)
		}
	}
	if ev1.count() != 1 || ev2.count() != 1 || ev1.got[0] != self {
		t.Errorf("evicted %v and %v, want %v once each", ev1.got, ev2.got, self)
	}
}

func TestNotifierSignsEveryAttemptAfresh(t *testing.T) {
	var (
		mu     sync.Mutex
		nonces []string
		gw     *httptest.Server
	)
	// A proxy in front of the gateway that fails the first two attempts;
	// the notifier calls the proxy, so its URL is the gateway's audience.
	flaky := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		nonces = append(nonces, r.Header.Get(flush.HeaderNonce))
		n := len(nonces)
		mu.Unlock()
		if n <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		r.URL.Host = strings.TrimPrefix(gw.URL, "http://")
		gwHandler(t, gw.URL).ServeHTTP(w, r)
	}))
	defer flaky.Close()
	gw, ev := newGatewayWith(t, []string{"http://" + flaky.Listener.Addr().String()})
	flaky.Start()

	n := newNotifier(t, flush.StaticTargets(flaky.URL), flush.RetryWait(time.Millisecond, 5*time.Millisecond))
	reports, err := n.Flush(context.Background())
	if err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if r := reports[0]; !r.Acked || r.Attempts != 3 {
		t.Errorf("report %+v, want acked after 3 attempts", r)
	}
	if nonces[0] == nonces[1] || nonces[1] == nonces[2] || nonces[0] == nonces[2] {
		t.Errorf("nonces %q repeat: a retry would be a replay", nonces)
	}
	if ev.count() != 1 {
		t.Errorf("evicted %d times, want 1", ev.count())
	}
}

// gwHandler forwards a request to the gateway at url.
func gwHandler(t *testing.T, url string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, url, r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		req.Header = r.Header.Clone()
		req.Close = true
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
	})
}

func TestNotifierReportsTargetsThatDoNotAck(t *testing.T) {
	ok, _ := newGateway(t)
	tests := []struct {
		name string
		give string
	}{
		{name: "a gateway that is down is reported", give: testutil.DownURL(t)},
		{name: "a slow gateway is reported", give: testutil.SlowServer(t).URL + "/flush"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNotifier(t,
				flush.StaticTargets(ok.URL+"/flush", tt.give),
				flush.AttemptTimeout(50*time.Millisecond),
				flush.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))),
				flush.RetryWait(5*time.Millisecond, 20*time.Millisecond),
			)
			const bound = 500 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			begin := time.Now()
			reports, err := n.Flush(ctx)
			if took := time.Since(begin); took > bound+200*time.Millisecond {
				t.Errorf("Flush took %s, over its bound %s", took, bound)
			}
			var ferr *flush.TargetError
			if !errors.As(err, &ferr) || ferr.Target != tt.give {
				t.Fatalf("Flush error = %v, want a *TargetError naming %s", err, tt.give)
			}
			if !reports[0].Acked {
				t.Errorf("the healthy gateway did not ack: %+v", reports[0])
			}
			if r := reports[1]; r.Acked || r.Target != tt.give || r.Attempts < 1 || r.Err == nil {
				t.Errorf("report %+v, want a failure for %s", r, tt.give)
			}
			t.Logf("report: %+v", reports[1])
		})
	}
}

func TestNotifierCallsSpringTargets(t *testing.T) {
	got := make(chan *http.Request, 1)
	spring := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
	}))
	defer spring.Close()
	n := newNotifier(t, flush.SpringTargets(spring.URL+"/flushCache"))
	reports, err := n.Flush(context.Background())
	if err != nil || !reports[0].Acked || !reports[0].Spring {
		t.Fatalf("Flush = %+v, %v", reports, err)
	}
	r := <-got
	if r.Method != http.MethodGet || r.URL.Path != "/flushCache" {
		t.Errorf("got %s %s, want GET /flushCache", r.Method, r.URL.Path)
	}
	q := r.URL.Query()
	if q.Get("applicationName") != "orders" || q.Get("host") != "10.0.0.7" || q.Get("id") != "orders-1" {
		t.Errorf("query %v", q)
	}
}

func TestNotifierRedactsTargets(t *testing.T) {
	u := strings.Replace(testutil.DownURL(t), "http://", "http://user:hunter2@", 1)
	n := newNotifier(t, flush.StaticTargets(u), flush.RetryMax(0))
	reports, err := n.Flush(context.Background())
	if strings.Contains(reports[0].Target, "hunter2") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("the password leaked: %q, %v", reports[0].Target, err)
	}
}

func TestNotifierWithoutTargetsDoesNothing(t *testing.T) {
	reports, err := newNotifier(t).Flush(context.Background())
	if len(reports) != 0 || err != nil {
		t.Errorf("Flush = %v, %v", reports, err)
	}
}

func TestNewNotifierRejectsInvalidInput(t *testing.T) {
	tests := []struct {
		name  string
		give  func() error
		wantE string
	}{
		{"an instance without an id", func() error {
			_, err := flush.NewNotifier(flush.Self{Service: "orders"}, secret)
			return err
		}, `flush: instance needs a service and an id (got "orders", "")`},
		{"a short secret", func() error { _, err := flush.NewNotifier(self, []byte("x")); return err }, "flush: secret is 1 bytes (minimum 16)"},
		{"a relative URL", func() error {
			_, err := flush.NewNotifier(self, secret, flush.StaticTargets("/flush"))
			return err
		},
			`flush: invalid flush URL "/flush" (need an absolute http or https URL)`},
		{"signed targets without a registration", func() error {
			_, err := flush.NewNotifier(self, secret, flush.StaticTargets("http://gw/flush"))
			return err
		}, "flush: StaticTargets and Targets need the Registration option (signed flushes name the registration they end)"},
		{"too many retries", func() error { _, err := flush.NewNotifier(self, secret, flush.RetryMax(11)); return err },
			"flush: invalid retry max 11 (must be 0 to 10)"},
		{"an inverted retry wait", func() error {
			_, err := flush.NewNotifier(self, secret, flush.RetryWait(time.Second, time.Millisecond))
			return err
		}, "flush: invalid retry wait 1s to 1ms (need 0 < min <= max)"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is rejected", func(t *testing.T) {
			if err := tt.give(); err == nil || err.Error() != tt.wantE {
				t.Errorf("got %v, want %q", err, tt.wantE)
			}
		})
	}
}
