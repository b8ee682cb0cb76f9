package flush_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracekit/gracekit/shutdown/flush"
)

const fuzzAudience = "http://gw.test:8080/flush"

// fuzzEvicter records every request it is asked to evict.
type fuzzEvicter struct {
	mu  sync.Mutex
	got []flush.Request
}

func (e *fuzzEvicter) Evict(_ context.Context, req flush.Request) (flush.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, req)
	return flush.Evicted, nil
}

func (e *fuzzEvicter) take() []flush.Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	got := e.got
	e.got = nil
	return got
}

func fuzzHandler(f *testing.F) (*flush.Handler, *fuzzEvicter) {
	ev := &fuzzEvicter{}
	h, err := flush.NewHandler(secret, []string{fuzzAudience}, flush.EvicterMap(map[string]flush.Evicter{"orders": ev}))
	if err != nil {
		f.Fatal(err)
	}
	return h, ev
}

func validBody() []byte {
	b, _ := json.Marshal(request(self, selfCzxid, fuzzAudience))
	return b
}

// FuzzHandler sends arbitrary requests, signed or not: the handler never
// panics, and evicts only for a valid signature over the body, a JSON
// content type, and a body naming this handler's audience and a
// registration.
func FuzzHandler(f *testing.F) {
	now := strconv.FormatInt(time.Now().Unix(), 10)
	f.Add(validBody(), now, "nonce-1", "", "application/json", true)
	f.Add(validBody(), now, "nonce-2", "00ff", "application/json", false)
	f.Add(validBody(), now, "nonce-3", "", "text/plain", true)
	f.Add([]byte(`{"service":"orders","id":"orders-1","czxid":1,"target":"http://elsewhere/flush"}`), now, "nonce-4", "", "application/json", true)
	f.Add([]byte(`{"service":"orders","id":"orders-1","target":"`+fuzzAudience+`"}`), now, "nonce-5", "", "application/json", true)
	f.Add([]byte(`{"service":`), "x", "", "zz", "application/json; charset=utf-8", false)
	f.Add([]byte(nil), "-1", strings.Repeat("n", 200), "", "", true)
	h, ev := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte, ts, nonce, sig, ctype string, sign bool) {
		if sign {
			sig = flush.Sign(secret, ts, nonce, body)
		}
		req := httptest.NewRequest(http.MethodPost, fuzzAudience, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set(flush.HeaderTimestamp, ts)
		req.Header.Set(flush.HeaderNonce, nonce)
		req.Header.Set(flush.HeaderSignature, sig)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		got := ev.take()
		// What the handler saw, as the HTTP header would carry it.
		hts, hnonce, hsig := req.Header.Get(flush.HeaderTimestamp), req.Header.Get(flush.HeaderNonce), req.Header.Get(flush.HeaderSignature)
		valid := hsig != "" && strings.EqualFold(hsig, flush.Sign(secret, hts, hnonce, body))
		if len(got) > 0 {
			if !valid {
				t.Fatalf("evicted %+v on an invalid signature (status %d)", got, rec.Code)
			}
			if g := got[0]; len(got) != 1 || g.Target != fuzzAudience || g.Czxid <= 0 || g.Service != "orders" || g.ID == "" {
				t.Fatalf("evicted %+v", got)
			}
			if rec.Code != http.StatusOK {
				t.Fatalf("evicted, answered %d", rec.Code)
			}
		}
		if rec.Code == http.StatusOK && len(got) == 0 {
			t.Fatal("answered 200 without evicting")
		}
		if !valid && rec.Code/100 == 2 {
			t.Fatalf("answered %d to an invalid signature", rec.Code)
		}
	})
}

var fuzzNonce struct {
	sync.Mutex
	n int
}

// FuzzRequest sends arbitrary bodies, validly signed: the parser never
// panics, and the handler evicts exactly the request the body names when
// it is a Request for this handler with a service, an id and a
// registration, and nothing otherwise.
func FuzzRequest(f *testing.F) {
	f.Add(validBody())
	f.Add([]byte(`{"service":"orders","id":"orders-1","czxid":-1,"target":"` + fuzzAudience + `"}`))
	f.Add([]byte(`{"service":"orders","id":"orders-1","czxid":1e3,"target":"` + fuzzAudience + `"}`))
	f.Add([]byte(`{"service":"billing","id":"b","czxid":9,"target":"` + fuzzAudience + `"}`))
	f.Add([]byte(`{"Service":"orders","ID":"x","Czxid":1,"Target":"HTTP://GW.TEST:8080/flush"}`))
	f.Add([]byte(`{"service":"orders","service":"orders","id":"a","czxid":1,"target":"` + fuzzAudience + `","target":"x"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	h, ev := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzNonce.Lock()
		fuzzNonce.n++
		nonce := "fuzz-" + strconv.Itoa(fuzzNonce.n)
		fuzzNonce.Unlock()
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req := httptest.NewRequest(http.MethodPost, fuzzAudience, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(flush.HeaderTimestamp, ts)
		req.Header.Set(flush.HeaderNonce, nonce)
		req.Header.Set(flush.HeaderSignature, flush.Sign(secret, ts, nonce, body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		got := ev.take()

		var want flush.Request
		ok := len(body) <= flush.DefaultMaxBodyBytes && json.Unmarshal(body, &want) == nil &&
			want.Service != "" && want.ID != "" && want.Czxid > 0 && want.Target == fuzzAudience
		switch {
		case ok && want.Service == "orders":
			if len(got) != 1 || got[0] != want || rec.Code != http.StatusOK {
				t.Fatalf("answered %d, evicted %+v; want 200 and %+v", rec.Code, got, want)
			}
		case ok:
			if len(got) != 0 || rec.Code != http.StatusAccepted || rec.Header().Get(flush.HeaderResult) != string(flush.NotRouted) {
				t.Fatalf("answered %d %q, evicted %+v; want 202 not-routed", rec.Code, rec.Header().Get(flush.HeaderResult), got)
			}
		default:
			if len(got) != 0 || rec.Code/100 == 2 {
				t.Fatalf("answered %d, evicted %+v for %q", rec.Code, got, body)
			}
		}
	})
}

// FuzzSpringQuery parses arbitrary Spring-style flush queries: never
// panics, and what parses has a service and an id within the limits, no
// registration or target, and parses the same once encoded again.
func FuzzSpringQuery(f *testing.F) {
	f.Add("applicationName=orders&host=10.0.0.7&id=orders-1")
	f.Add("applicationName=orders&host=10.0.0.7:8080&id=orders-1")
	f.Add("applicationName=orders&host=[::1]:8080&id=orders-1")
	f.Add("applicationName=orders&host=::1&id=orders-1")
	f.Add("applicationName=orders&host=[::1]&id=orders-1")
	f.Add("applicationName=orders&id=orders-1&id=orders-2")
	f.Add("applicationName=&id=x")
	f.Add("applicationName=a%00b&id=x")
	f.Add("applicationName=orders&host=h:99999&id=x")
	f.Add("host=h&id=x")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		req, err := flush.ParseSpringQuery(q)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "flush: ") {
				t.Fatalf("error %q", err)
			}
			return
		}
		if req.Service == "" || req.ID == "" || len(req.Service) > flush.MaxSpringParamLen || len(req.ID) > flush.MaxSpringParamLen {
			t.Fatalf("parsed %+v", req)
		}
		if req.Czxid != 0 || req.Target != "" || req.Port < 0 || req.Port > 65535 {
			t.Fatalf("parsed %+v", req)
		}
		again := url.Values{flush.SpringParamService: {req.Service}, flush.SpringParamID: {req.ID}}
		switch {
		case req.Port != 0:
			again.Set(flush.SpringParamHost, net.JoinHostPort(req.Address, strconv.Itoa(req.Port)))
		case req.Address != "":
			again.Set(flush.SpringParamHost, req.Address)
		}
		back, err := flush.ParseSpringQuery(again)
		if err != nil || back != req {
			t.Fatalf("%+v encoded as %q parses as %+v, %v", req, again.Encode(), back, err)
		}
	})
}

// The query a Notifier sends to a Spring target parses back to its self.
func TestParseSpringQueryReadsWhatTheNotifierSends(t *testing.T) {
	got := make(chan url.Values, 1)
	spring := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.URL.Query() }))
	defer spring.Close()
	if _, err := newNotifier(t, flush.SpringTargets(spring.URL+"/flushCache")).Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	req, err := flush.ParseSpringQuery(<-got)
	if err != nil {
		t.Fatal(err)
	}
	if want := (flush.Request{Service: self.Service, ID: self.ID, Address: self.Address}); req != want {
		t.Errorf("parsed %+v, want %+v", req, want)
	}
}
