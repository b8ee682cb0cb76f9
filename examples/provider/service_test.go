package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRoutesAnswerWithTheInstance(t *testing.T) {
	srv := httptest.NewServer(newHandler(&quoteService{instance: "quote-7"}))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	resp, err := srv.Client().Get(srv.URL + "/quote?symbol=abc")
	if err != nil {
		t.Fatal(err)
	}
	var q Quote
	err = json.NewDecoder(resp.Body).Decode(&q)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || q.Symbol != "ABC" || q.Price <= 0 || q.Instance != "quote-7" {
		t.Fatalf("GET /quote = %d %+v %v", resp.StatusCode, q, err)
	}

	resp, err = srv.Client().Post(srv.URL+"/orders", "application/json", strings.NewReader(`{"symbol":"ABC","qty":3}`))
	if err != nil {
		t.Fatal(err)
	}
	var o Order
	err = json.NewDecoder(resp.Body).Decode(&o)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || o.OrderID == "" || o.Instance != "quote-7" {
		t.Fatalf("POST /orders = %d %+v %v", resp.StatusCode, o, err)
	}

	resp, err = srv.Client().Post(srv.URL+"/orders", "application/json", strings.NewReader(`{"symbol":"ABC","qty":0}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("POST /orders with qty 0 = %d, want 400", resp.StatusCode)
	}
}

func TestOrdersAreLedgeredBeforeTheAnswer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	led, err := openLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	srv := httptest.NewServer(newHandler(&quoteService{instance: "quote-7", ledger: led}))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	for _, h := range []struct{ name, key string }{{HeaderOrderKey, "k1"}, {HeaderIdempotencyKey, "k2"}, {"", ""}, {HeaderOrderKey, "bad key"}} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"symbol":"ABC","qty":3}`))
		if h.name != "" {
			req.Header.Set(h.name, h.key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := http.StatusOK
		if h.key == "bad key" {
			want = http.StatusBadRequest
		}
		if resp.StatusCode != want {
			t.Errorf("POST with %s %q = %d, want %d", h.name, h.key, resp.StatusCode, want)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "k1\nk2\n" {
		t.Errorf("ledger = %q, want k1 and k2, one per line", b)
	}
}

func TestTheHealthFileMakesTheInstanceSick(t *testing.T) {
	f := filepath.Join(t.TempDir(), "sick")
	check := fileHealth(f)
	if err := check(context.Background()); err != nil {
		t.Errorf("healthy without the file: %v", err)
	}
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := check(context.Background()); err == nil {
		t.Error("healthy while the file exists")
	}
}
