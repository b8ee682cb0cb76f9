package sd

import (
	"context"
	"fmt"
	"time"

	"github.com/gracekit/gracekit/internal/zkconn"
	"github.com/gracekit/gracekit/internal/zkwire"
)

// A lost session, and the zxid order a new one starts.
//
// ZooKeeper orders zxids within a session: a session resumed on another
// server sends the last zxid it saw, and a server behind it refuses it
// (zkconn.Fence, zkwire.Config.LastZxid). Across sessions there is no such
// order to keep. A session is lost when it has had no live connection for
// its session timeout and a server that runs is behind it: one restored
// from an older backup, which would refuse it for ever. Curator's
// ConnectionStateManager calls a session LOST after its timeout alone; a
// session that is only without a server (a whole ensemble restarting, a
// partition) is kept here, since the ensemble may hold it still (a
// restarted server gives every session a fresh timeout) and with it the
// provider's ephemeral node, and a server that expired it says so.
//
// Which server is behind is asked, not guessed: a server that closed a
// session's handshake, or whose answers a fence refused, is probed
// (behind) with a session of the probe's own, from zxid 0, synced with the
// leader, and its last zxid compared with the session's. A server starting
// up or cut off from its quorum closes the probe too, or cannot sync it,
// and is not behind.
//
// A new session takes the lost one's place, from zxid 0, and syncs before
// its first read, so that the read sees every write the ensemble committed
// before it (with no zxid of its own yet, nothing else keeps it off a
// follower behind the leader); its first published set is that read, even
// when older than what the lost session showed. The fences hold within the
// new session as they did within the old one. The Client's first session
// has shown nothing yet, and does not sync.
//
// This file does it for the Client's own (go-zookeeper) session; the watch
// session does the same in its run loop (internal/zkconn/watch.go).

// ownSessionTimeout is the session timeout the server granted the Client's
// own session, or the one asked for before any was granted.
func (c *Client) ownSessionTimeout() time.Duration {
	if ms := c.ownTimeout.Load(); ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return c.opts.sessionTimeout
}

// ownLost is asked at each dial of the own session: it tells whether the
// session is lost and go-zookeeper must be told it expired (expire). When
// the session has had no connection for its timeout and the last server
// that closed its handshake is behind it, the zxid order starts anew (the
// next handshake sends 0).
func (c *Client) ownLost() (expire bool) {
	down := c.ownDown.Load()
	timeout := c.ownSessionTimeout()
	if down == 0 || time.Since(time.Unix(0, down)) < timeout {
		return false
	}
	addr := c.ownRefused.Swap(nil) // probed once per refusal
	if addr == nil {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // Close ends the probe
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	zxid := c.zxid.Load()
	at, behind := c.behind(ctx, *addr, zxid)
	if !behind {
		return false
	}
	c.resetOwnZxid()
	sid := c.SessionID()
	c.logger.Warn("the session had no server for its timeout and a server is behind it: lost; a new session starts from zxid 0 and syncs before it reads",
		"session", zkconn.HexSession(sid), "server", *addr, "server_zxid", fmt.Sprintf("%#x", at), "session_zxid", fmt.Sprintf("%#x", zxid))
	return sid != 0
}

// behind tells whether the server at addr runs and is behind zxid, the
// last zxid a session saw, and its last zxid: it opens a session of its
// own there (zxid 0, which no server refuses for its zxid), syncs it with
// the leader, reads, and closes it. A server that does not take the probe
// or cannot sync it (starting up, cut off from its quorum) is not behind.
// It ends within the session timeout, or with ctx.
func (c *Client) behind(ctx context.Context, addr string, zxid int64) (at int64, behind bool) {
	if zxid <= 0 {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.sessionTimeout)
	defer cancel()
	conn, err := c.dialWatch(ctx, addr, 0, nil, 0, nil)
	if err != nil {
		return 0, false
	}
	defer conn.Close()
	calls := conn.SendAll(
		zkwire.Req{Op: zkwire.OpSync, Body: zkwire.SyncBody("/")},
		zkwire.Req{Op: zkwire.OpGetData, Body: zkwire.GetDataBody("/")},
	)
	if _, err := calls[0].Wait(ctx); err != nil {
		return 0, false
	}
	if _, err := calls[1].Wait(ctx); err != nil && zkwire.Code(err) == 0 {
		return 0, false // an error code (an ACL on /) still carries the zxid
	}
	at = conn.LastZxid()
	return at, at < zxid
}

// resetOwnZxid starts the own session's zxid order anew: its next
// handshake sends 0, and a bulk session of the order before notes nothing.
func (c *Client) resetOwnZxid() {
	c.zmu.Lock()
	defer c.zmu.Unlock()
	c.zlineage++
	c.zxid.Store(0)
}

// ownZxid is the own session's zxid order now: its count of losses, and
// the highest zxid seen in it, which a bulk session's handshake sends.
func (c *Client) ownZxid() (lineage uint64, zxid int64) {
	c.zmu.Lock()
	defer c.zmu.Unlock()
	return c.zlineage, c.zxid.Load()
}

// sawOwnZxid notes zxid z, seen by a bulk session dialled in lineage, unless
// the order started anew since.
func (c *Client) sawOwnZxid(lineage uint64, z int64) {
	c.zmu.Lock()
	defer c.zmu.Unlock()
	if lineage == c.zlineage {
		c.sawZxid(z)
	}
}

// sawZxid notes a zxid the Client's own session saw, for its next
// handshake (zkconn.Fence; bulk sessions go through sawOwnZxid).
func (c *Client) sawZxid(z int64) {
	for {
		old := c.zxid.Load()
		if z <= old || c.zxid.CompareAndSwap(old, z) {
			return
		}
	}
}

// syncOwn syncs the Client's own session before its first call after a
// loss: the new session sent zxid 0, so it may be on a follower behind the
// leader, and nothing but a sync orders its first read after what the
// ensemble committed before. Once synced, the session's zxid order has a
// zxid again, which every later handshake of it sends. Calls wait for the
// one sync under way.
func (c *Client) syncOwn(ctx context.Context) error {
	for {
		conn := c.zkIfAny()
		if conn == nil || conn.SessionID() == 0 {
			return nil
		}
		c.zmu.Lock()
		lineage, synced := c.zlineage, c.zsynced
		c.zmu.Unlock()
		if lineage == synced {
			return nil
		}
		c.mu.Lock()
		call := c.syncing
		if call == nil {
			call = &syncCall{done: make(chan struct{})}
			c.syncing = call
			go func() {
				// After a loss and before the next, the session is one
				// dialled with zxid 0: awaitSettled lets no call through
				// while there is none.
				_, err := conn.Sync("/")
				if err == nil {
					c.zmu.Lock()
					if c.zlineage == lineage {
						c.zsynced = lineage
					}
					c.zmu.Unlock()
				}
				c.mu.Lock()
				call.err = err
				c.syncing = nil
				c.mu.Unlock()
				close(call.done)
			}()
		}
		c.mu.Unlock()
		select {
		case <-call.done:
			if call.err != nil {
				return fmt.Errorf("sd: sync the new session: %w", call.err)
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return ErrClosed
		}
	}
}

// syncCall is a sync of the own session under way.
type syncCall struct {
	done chan struct{}
	err  error // set before done closes
}
