package sd

import (
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/gracekit/gracekit/internal/zkconn"
)

// TLSConfig is the client side of a ZooKeeper secureClientPort (see
// docs/SECURITY.md). Files are PEM.
type TLSConfig struct {
	// CAFile is the bundle of CAs that signed the servers' certificates
	// (the servers' ssl.trustStore, for their part). Empty: the system's.
	CAFile string
	// CertFile and KeyFile are the client certificate and its key, for a
	// server with ssl.clientAuth=need (its default): both or neither. They
	// are read again when either file changes, so a rotation needs no
	// restart; a connection keeps the certificate it opened with.
	CertFile, KeyFile string
	// ServerName is checked against each server's certificate. Empty: the
	// host of the server's address in the connect string (an IP address
	// is checked against the certificate's IP SANs).
	ServerName string
	// MinVersion is tls.VersionTLS12 (the default, 0) or tls.VersionTLS13.
	MinVersion uint16
}

// TLS makes every connection of the Client (its own session, its watch
// session, bulk reads) a TLS one. The files are read now: one that is
// missing or malformed, or a client certificate that expired, is a
// *ConfigError naming the file.
func TLS(cfg TLSConfig) ClientOption {
	return clientOptionFunc(func(o *clientOptions) error {
		t := zkconn.TLS(cfg)
		if _, err := zkconn.New(zkconn.Security{TLS: &t}); err != nil {
			return configError(err)
		}
		o.sec.TLS = &t
		return nil
	})
}

// SASL authenticates every session of the Client with SASL DIGEST-MD5 as
// user, before any other request (a server with
// sessionRequireClientSASLAuth=true refuses sessions without it): user and
// password are a user_<user>="<password>" of the servers' JAAS Server
// section. Nodes the Client creates are then world-readable and changeable
// only by that user (a sasl ACL), as with DigestAuth. The password appears
// in no log, error or printed option. Kerberos (GSSAPI) is not supported.
func SASL(user, password string) ClientOption {
	return clientOptionFunc(func(o *clientOptions) error {
		s := zkconn.SASL{User: user, Password: zkconn.Secret(password)}
		if _, err := zkconn.New(zkconn.Security{SASL: &s}); err != nil {
			return configError(err)
		}
		o.sec.SASL = &s
		return nil
	})
}

// configError turns zkconn's construction error into the package's.
func configError(err error) error {
	var ce *zkconn.ConfigError
	if errors.As(err, &ce) {
		want := ce.Want
		if ce.Err != nil {
			want += ": " + ce.Err.Error()
		}
		return &ConfigError{Field: ce.Field, Value: ce.Value, Want: want}
	}
	return err
}

// refusedByAll is the last refusal for a setting (an unknown CA, a wrong
// SASL password, a server that requires SASL) when every server of the
// ensemble refused the Client so within zkconn.DefaultHold, else nil:
// waiting longer would not change the answer, so calls fail at once with
// it. One misconfigured member of a healthy ensemble is not all of them.
func (c *Client) refusedByAll() error {
	f := c.sec.Failure()
	if f == nil {
		return nil
	}
	if !c.sec.AllHeld(c.hp.List()) {
		return nil
	}
	return &noServerError{fmt.Errorf("sd: every ZooKeeper server of %v refused the connection: %w", c.servers, f)}
}

// saslACL is the ACL of nodes a SASL user creates: world read, all to
// the user.
func saslACL(user string) zk.ACL {
	return zk.ACL{Perms: zk.PermAll, Scheme: "sasl", ID: user}
}

// parentACLFix is the zkCli command that gives parent p the Client's ACL.
func (c *Client) parentACLFix(p string) string {
	acl := "world:anyone:r"
	if c.opts.user != "" {
		acl += ",digest:" + c.opts.user + ":<digest>:cdrwa"
	}
	if s := c.opts.sec.SASL; s != nil {
		acl += ",sasl:" + s.User + ":cdrwa"
	}
	return "setAcl " + p + " " + acl
}
