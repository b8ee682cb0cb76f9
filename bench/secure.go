package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	kitsd "github.com/go-kit/kit/sd"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/zkconn"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// The secure suite: what TLS and SASL cost. One server with a TLS port
// beside its plaintext one (both on the Netty factory, so that only TLS
// differs) loads n1000 over each in alternating rounds, twice a round: on
// a new Client (cold: its handshake counts) and with a new Instancer on a
// Client whose watch session is up (warm: what a long-lived consumer pays
// to watch one more service), counting the connections each load opened.
// It opens sessions plaintext, over TLS (client certificate), over SASL
// DIGEST-MD5 and over both. A second server requires SASL (sessionRequireClientSASLAuth): its
// sessions are the SASL ones.
func init() { register("secure", runSecure) }

const secureUser, securePassword = "bench", "bench-password"

// secureWarmup is how many untimed rounds of loads come first. The
// server's TLS code (the JDK's ciphers and key exchange, Netty's
// SslHandler) runs interpreted until its JIT has compiled it, which takes
// some dozens of TLS loads: after two warm-up rounds, a load over TLS on a
// warm Client took 29 ms in the first 25 rounds and 7 to 9 ms from the
// 50th on (plaintext 7 then 4.5 ms). A production server compiled it long
// ago; the figures are of a cold client, not of a cold server.
const secureWarmup = loadRuns

func runSecure() error {
	dir, err := os.MkdirTemp("", "gracekit-bench-secure-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pki, err := zktest.NewPKI(filepath.Join(dir, "pki"))
	if err != nil {
		return err
	}
	cluster, err := zktest.Start(filepath.Join(dir, "tls"), append(serverOptions, zktest.TLS(pki), zktest.JVMArgs("-Xmx1g"))...)
	if err != nil {
		return err
	}
	defer cluster.Close()
	writer, _, err := zk.Connect(cluster.Addrs(), 30*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		return err
	}
	defer writer.Close()
	const n = 1000
	if err := populate(writer, "load1000", n); err != nil {
		return err
	}
	// Every connection either side's Clients open goes through dials, which
	// counts them: the connections a load opened are part of its cost.
	var dials atomic.Int64
	counted := sd.Dialer(func(network, addr string, timeout time.Duration) (net.Conn, error) {
		dials.Add(1)
		return net.DialTimeout(network, addr, timeout)
	})
	tlsOpt := sd.TLS(sd.TLSConfig{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey})
	plain := func() (*sd.Client, error) {
		return sd.NewClient(cluster.ConnectString(), sd.SessionTimeout(30*time.Second), counted)
	}
	secure := func() (*sd.Client, error) {
		return sd.NewClient(cluster.SecureConnectString(), sd.SessionTimeout(30*time.Second), tlsOpt, counted)
	}
	// The warm figure's Clients, one a side for the whole run: each keeps
	// its watch session up with an Instancer of another service, as a
	// long-lived consumer's Client does while it watches anything.
	if err := populate(writer, "held", 1); err != nil {
		return err
	}
	heldTLS, err := heldClient(secure, "held")
	if err != nil {
		return err
	}
	defer heldTLS.close()
	heldPlain, err := heldClient(plain, "held")
	if err != nil {
		return err
	}
	defer heldPlain.close()
	type side struct {
		load                         func() (time.Duration, error)
		times, conns, server, client *[]float64
	}
	// Per load: its time, the connections it opened, and the CPU it cost
	// the server's JVM and this process (the server's, at /proc's 10 ms
	// tick, is summed over the rounds before it is divided).
	var cold, warm struct {
		tls, plain, tlsConns, plainConns []float64
		tlsServer, plainServer           []float64
		tlsClient, plainClient           []float64
	}
	sides := []side{
		{func() (time.Duration, error) { return loadWith(secure, "load1000", n) }, &cold.tls, &cold.tlsConns, &cold.tlsServer, &cold.tlsClient},
		{func() (time.Duration, error) { return loadWith(plain, "load1000", n) }, &cold.plain, &cold.plainConns, &cold.plainServer, &cold.plainClient},
		{func() (time.Duration, error) { return watchFor(heldTLS.c, "load1000", n, time.Now()) }, &warm.tls, &warm.tlsConns, &warm.tlsServer, &warm.tlsClient},
		{func() (time.Duration, error) { return watchFor(heldPlain.c, "load1000", n, time.Now()) }, &warm.plain, &warm.plainConns, &warm.plainServer, &warm.plainClient},
	}
	srv := cluster.Servers[0]
	for run := -secureWarmup; run < loadRuns; run++ {
		for _, s := range sides {
			quiesce()
			before := dials.Load()
			s0, err := srv.CPUTime()
			if err != nil {
				return err
			}
			c0 := cpuTime()
			d, err := s.load()
			if err != nil {
				return err
			}
			s1, err := srv.CPUTime()
			if err != nil {
				return err
			}
			if run >= 0 {
				*s.times = append(*s.times, ms(d))
				*s.conns = append(*s.conns, float64(dials.Load()-before))
				*s.server = append(*s.server, ms(s1-s0))
				*s.client = append(*s.client, ms(cpuTime()-c0))
			}
		}
	}
	fmt.Printf("BENCH name=sd_load_tls_n%d tls=%sms plaintext=%sms %s\n", n, num(median(cold.tls)), num(median(cold.plain)), spread(cold.tls, cold.plain))
	fmt.Printf("BENCH name=sd_load_tls_conns_n%d tls=%gconns plaintext=%gconns %s\n", n, median(cold.tlsConns), median(cold.plainConns), spread(cold.tlsConns, cold.plainConns))
	fmt.Printf("BENCH name=sd_load_tls_warm_n%d tls=%sms plaintext=%sms %s\n", n, num(median(warm.tls)), num(median(warm.plain)), spread(warm.tls, warm.plain))
	fmt.Printf("BENCH name=sd_load_tls_warm_conns_n%d tls=%gconns plaintext=%gconns %s\n", n, median(warm.tlsConns), median(warm.plainConns), spread(warm.tlsConns, warm.plainConns))
	// Where a TLS load's time goes: the server's CPU per load (mean: its
	// tick is coarser than a load) and this process's.
	for _, f := range []struct {
		name       string
		tls, plain []float64
	}{
		{"sd_load_tls_server_cpu", cold.tlsServer, cold.plainServer},
		{"sd_load_tls_client_cpu", cold.tlsClient, cold.plainClient},
		{"sd_load_tls_warm_server_cpu", warm.tlsServer, warm.plainServer},
		{"sd_load_tls_warm_client_cpu", warm.tlsClient, warm.plainClient},
	} {
		t, p := mean(f.tls), mean(f.plain)
		fmt.Printf("BENCH name=%s_n%d tls=%sms plaintext=%sms ratio=%.2f rounds=%d\n", f.name, n, num(t), num(p), p/t, len(f.tls))
	}

	saslCluster, err := zktest.Start(filepath.Join(dir, "sasl"), append(serverOptions, zktest.TLS(pki),
		zktest.SASL(map[string]string{secureUser: securePassword}), zktest.JVMArgs("-Xmx1g"))...)
	if err != nil {
		return err
	}
	defer saslCluster.Close()
	tlsSec := &zkconn.TLS{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
	sasl := &zkconn.SASL{User: secureUser, Password: securePassword}
	plainTimes, err := sessionOpens(cluster.Servers[0].Addr(), zkconn.Security{})
	if err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		addr string
		sec  zkconn.Security
	}{
		{"tls", cluster.Servers[0].SecureAddr(), zkconn.Security{TLS: tlsSec}},
		{"sasl", saslCluster.Servers[0].Addr(), zkconn.Security{SASL: sasl}},
		{"tls_sasl", saslCluster.Servers[0].SecureAddr(), zkconn.Security{TLS: tlsSec, SASL: sasl}},
	} {
		times, err := sessionOpens(c.addr, c.sec)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		fmt.Printf("BENCH name=session_open_%s %s=%sms plaintext=%sms %s\n", c.name, c.name, num(median(times)), num(median(plainTimes)), spread(times, plainTimes))
	}
	return nil
}

// loadWith times a new Client's Instancer from construction to its first
// event with n instances, the sd suite's sd_load figure.
func loadWith(mk func() (*sd.Client, error), service string, n int) (time.Duration, error) {
	start := time.Now()
	cl, err := mk()
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	return watchFor(cl, service, n, start)
}

// watchFor times a new Instancer of service on cl, from start to its first
// event with n instances, and stops it.
func watchFor(cl *sd.Client, service string, n int, start time.Time) (time.Duration, error) {
	in, err := sd.NewInstancer(cl, service, ourOptions()...)
	if err != nil {
		return 0, err
	}
	w := &watcher{ch: make(chan kitsd.Event, 1024)}
	in.Register(w.ch)
	err = w.await(n)
	d := time.Since(start)
	in.Deregister(w.ch)
	in.Stop()
	return d, err
}

func mean(v []float64) float64 {
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(max(1, len(v)))
}

// held is a Client whose sessions an Instancer of one service keeps up.
type held struct {
	c  *sd.Client
	in *sd.Instancer
}

// heldClient makes a Client and watches service (one instance) on it
// until close.
func heldClient(mk func() (*sd.Client, error), service string) (*held, error) {
	cl, err := mk()
	if err != nil {
		return nil, err
	}
	in, err := sd.NewInstancer(cl, service, ourOptions()...)
	if err != nil {
		cl.Close()
		return nil, err
	}
	w := &watcher{ch: make(chan kitsd.Event, 16)}
	in.Register(w.ch)
	err = w.await(1)
	in.Deregister(w.ch)
	if err != nil {
		in.Stop()
		cl.Close()
		return nil, fmt.Errorf("held client: %w", err)
	}
	return &held{cl, in}, nil
}

func (h *held) close() {
	h.in.Stop()
	h.c.Close()
}

// sessionOpens times go-zookeeper sessions through zkconn's dialer, from
// Connect to the session (SASL included: it is done before go-zookeeper
// reads the answer to its handshake), loadRuns of them after two warm-ups.
func sessionOpens(addr string, sec zkconn.Security) ([]float64, error) {
	l, err := zkconn.New(sec)
	if err != nil {
		return nil, err
	}
	var out []float64
	for run := -2; run < loadRuns; run++ {
		quiesce()
		got := make(chan struct{}, 1)
		start := time.Now()
		conn, _, err := zk.Connect([]string{addr}, 30*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}),
			zk.WithDialer(zk.Dialer(l.Wrap(net.DialTimeout))),
			zk.WithEventCallback(func(ev zk.Event) {
				if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
					select {
					case got <- struct{}{}:
					default:
					}
				}
			}))
		if err != nil {
			return nil, err
		}
		select {
		case <-got:
		case <-time.After(30 * time.Second):
			conn.Close()
			return nil, fmt.Errorf("no session from %s within 30s: %v", addr, l.Failure())
		}
		d := time.Since(start)
		conn.Close()
		if run >= 0 {
			out = append(out, ms(d))
		}
	}
	return out, nil
}
