package sd

import (
	"crypto/x509"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/zkconn"
)

// ZKConn is the Client's own go-zookeeper connection.
func ZKConn(c *Client) *zk.Conn { return c.zk() }

// PresentedCertificate is the client certificate the Client's last TLS
// connection presented.
func PresentedCertificate(c *Client) *x509.Certificate { return c.sec.Presented() }

// SecurityOf is the security settings opts make.
func SecurityOf(opts ...ClientOption) zkconn.Security {
	var o clientOptions
	for _, opt := range opts {
		if err := opt.applyClient(&o); err != nil {
			panic(err)
		}
	}
	return o.sec
}
