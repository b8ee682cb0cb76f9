package endpoint

import (
	"errors"
	"io"
	"net"
	"syscall"

	kitlb "github.com/go-kit/kit/sd/lb"
)

// Class says whether a failed attempt may be repeated, and for which requests.
type Class int

const (
	// Permanent failures are returned to the caller as they are.
	Permanent Class = iota
	// Retryable failures may have reached the instance (a reset connection,
	// a 503 from a draining instance). They are retried unless the request
	// is marked [NonIdempotent].
	Retryable
	// NotSent failures provably never reached an instance (the connection
	// was refused, no instance was available, the instance was removed
	// before the call started). Every request may be retried.
	NotSent
)

// String returns the class name.
func (c Class) String() string {
	switch c {
	case Permanent:
		return "permanent"
	case Retryable:
		return "retryable"
	case NotSent:
		return "not sent"
	default:
		return "unknown"
	}
}

// Classifier sorts an attempt's error into a [Class]. It is called only with
// non-nil errors, from the calling goroutine, and must not block.
type Classifier func(err error) Class

// ErrRemoved is returned by an instance's endpoint when the instance was
// removed from discovery and closed before the call started. It is [NotSent].
var ErrRemoved = errors.New("endpoint: instance removed before the call started")

// ErrNotSent is matched (errors.Is) by the error of a call that its
// transport proved never left the client: a gRPC call that got no
// connection (see endpoint/grpcfactory). It is [NotSent].
var ErrNotSent = errors.New("endpoint: request not sent")

// ErrUnavailable is matched (errors.Is) by the error of a 503 response; see
// [StatusError]. It is [Retryable].
var ErrUnavailable = errors.New("endpoint: service unavailable")

// Classify is the default [Classifier]:
//   - [NotSent]: [ErrRemoved], [ErrNotSent], go-kit's lb.ErrNoEndpoints, a failed dial
//     (*net.OpError with Op "dial"), ECONNREFUSED, and net/http's "server
//     closed idle connection" (the server closed a pooled connection before
//     the request was written);
//   - [Retryable]: [ErrUnavailable] (503), ECONNRESET, EPIPE, io.EOF and
//     io.ErrUnexpectedEOF (the connection closed before a full response);
//   - [Permanent]: everything else, including context errors.
//
// A [*WrittenError] (the request was written at least once, then failed,
// perhaps on a connection net/http opened to replay it) is [Retryable] at
// most: never [NotSent].
func Classify(err error) Class {
	var written *WrittenError
	switch {
	case err == nil:
		return Permanent
	case errors.As(err, &written):
		// Sent once at least: retryable at most, whatever came after.
		if c := Classify(written.Err); c == Permanent {
			return Permanent
		}
		return Retryable
	case errors.Is(err, ErrRemoved), errors.Is(err, ErrNotSent), errors.Is(err, kitlb.ErrNoEndpoints),
		errors.Is(err, syscall.ECONNREFUSED):
		return NotSent
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" || serverClosedIdle(err) {
		return NotSent
	}
	switch {
	case errors.Is(err, ErrUnavailable), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF):
		return Retryable
	}
	return Permanent
}

// serverClosedIdle matches net/http's unexported errServerClosedIdle, which
// has no exported sentinel, by its message at the end of err's chain.
func serverClosedIdle(err error) bool {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error() == "http: server closed idle connection"
		}
		err = next
	}
}
