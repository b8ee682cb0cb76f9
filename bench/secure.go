package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	kitsd "github.com/go-kit/kit/sd"
	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/zkconn"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/zktest"
)

// The secure suite: what TLS and SASL cost. One server with a TLS port
// beside its plaintext one (both on the Netty factory, so that only TLS
// differs) loads n1000 over each in alternating rounds, and opens sessions
// plaintext, over TLS (client certificate), over SASL DIGEST-MD5 and over
// both. A second server requires SASL (sessionRequireClientSASLAuth): its
// sessions are the SASL ones.
func init() { register("secure", runSecure) }

const secureUser, securePassword = "bench", "bench-password"

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
	tlsOpt := sd.TLS(sd.TLSConfig{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey})
	plain := func() (*sd.Client, error) {
		return sd.NewClient(cluster.ConnectString(), sd.SessionTimeout(30*time.Second))
	}
	secure := func() (*sd.Client, error) {
		return sd.NewClient(cluster.SecureConnectString(), sd.SessionTimeout(30*time.Second), tlsOpt)
	}
	var tlsRuns, plainRuns []float64
	for run := -2; run < loadRuns; run++ {
		for _, side := range []struct {
			mk  func() (*sd.Client, error)
			out *[]float64
		}{{secure, &tlsRuns}, {plain, &plainRuns}} {
			quiesce()
			d, err := loadWith(side.mk, "load1000", n)
			if err != nil {
				return err
			}
			if run >= 0 {
				*side.out = append(*side.out, ms(d))
			}
		}
	}
	fmt.Printf("BENCH name=sd_load_tls_n%d tls=%sms plaintext=%sms %s\n", n, num(median(tlsRuns)), num(median(plainRuns)), spread(tlsRuns, plainRuns))

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
