package zkconn

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ZooKeeper's SASL over its own protocol (ClientCnxn, ZooKeeperSaslClient,
// ZooKeeperServer.processSasl): after the ConnectResponse the client sends
// sasl requests (opcode 102, GetSASLRequest{token}) and the server answers
// each with SetSASLResponse{token}. For DIGEST-MD5 the first request has an
// empty token and is answered with the digest-challenge; the second carries
// the digest-response and is answered with response-auth, and the server
// has then added the id ("sasl", user) to the connection. A server that
// refuses the response answers an error code (-124 when SASL is required,
// else AUTHFAILED -115) and closes the session.

const (
	opSASL = 102
	// saslRealm and saslURI are what ZooKeeper's server and Java client
	// use for DIGEST-MD5 (SecurityUtils.createSaslClient: protocol
	// "zookeeper", server name "zk-sasl-md5").
	saslRealm = "zk-sasl-md5"
	saslURI   = "zookeeper/" + saslRealm

	codeAuthFailed = -115
)

// sasl runs the exchange on c's connection, which has just read its
// session's ConnectResponse. Its requests use xids 1 and 2, as the Java
// client's first requests do; the server only echoes them.
func (c *secConn) sasl() error {
	s := c.l.sec.SASL
	d := &digestMD5{user: s.User, password: string(s.Password), uri: saslURI}
	fail := func(err error, setting bool, fix string) error {
		e := &Error{Server: c.addr, Step: "SASL DIGEST-MD5 as user " + fmt.Sprintf("%q", s.User), Err: err, Fix: fix, Setting: setting}
		if setting {
			c.l.refused(e)
		}
		return e
	}
	challenge, code, err := c.saslRound(1, nil)
	switch {
	case err != nil:
		return fail(err, false, "")
	case code != 0:
		return fail(fmt.Errorf("the server answered error %d to the first SASL request", code), true,
			"check that the server has authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider and a JAAS Server section")
	case len(challenge) == 0:
		return fail(errors.New("the server sent no challenge: it does not run SASL"), true,
			"enable SASL on the server (authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider, a JAAS Server section), or unset "+nameSASL)
	}
	resp, err := d.respond(challenge)
	if err != nil {
		return fail(err, true, "the server's SASL is not DIGEST-MD5 as gracekit speaks it (Kerberos/GSSAPI is not supported)")
	}
	final, code, err := c.saslRound(2, resp)
	switch {
	case err != nil:
		return fail(err, false, "")
	case code == codeSASLRequired || code == codeAuthFailed:
		return fail(errors.New("the server refused the user or password"), true,
			"check "+namePassword+" against the server's JAAS Server section (user_"+s.User+"=\"...\")")
	case code != 0:
		return fail(fmt.Errorf("the server answered error %d to the SASL response", code), true, "check the server's SASL settings")
	}
	if err := d.verify(final); err != nil {
		return fail(err, true, "the server's JAAS Server section holds a different password: check "+namePassword)
	}
	return nil
}

// saslRound sends one sasl request with token and reads its reply: the
// server's token and error code.
func (c *secConn) saslRound(xid int32, token []byte) ([]byte, int32, error) {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 16+len(token)), uint32(12+len(token)))
	b = binary.BigEndian.AppendUint32(b, uint32(xid))
	b = binary.BigEndian.AppendUint32(b, opSASL)
	b = binary.BigEndian.AppendUint32(b, uint32(len(token)))
	b = append(b, token...)
	if _, err := c.Conn.Write(b); err != nil {
		return nil, 0, err
	}
	for {
		frame, err := readFrame(c.Conn)
		if err != nil {
			return nil, 0, c.readError(err, "SASL")
		}
		body := frame[4:]
		if len(body) < 16 {
			return nil, 0, fmt.Errorf("zkconn: short SASL reply (%d bytes)", len(body))
		}
		rxid := int32(binary.BigEndian.Uint32(body[0:4]))
		code := int32(binary.BigEndian.Uint32(body[12:16]))
		if rxid != xid {
			continue // a notification or ping reply cannot come yet; skip what is not ours
		}
		rest := body[16:]
		if len(rest) < 4 {
			return nil, code, nil
		}
		n := int32(binary.BigEndian.Uint32(rest[:4]))
		if n < 0 {
			return nil, code, nil
		}
		if int(n) > len(rest)-4 {
			return nil, code, fmt.Errorf("zkconn: SASL token of %d bytes in a reply of %d", n, len(rest)-4)
		}
		return rest[4 : 4+n], code, nil
	}
}
