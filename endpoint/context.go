package endpoint

import "context"

type stickyKeyCtx struct{}

type nonIdempotentCtx struct{}

// WithStickyKey returns a copy of ctx that carries key for the [Sticky]
// balancer: calls with the same key go to the same instance while it is
// available. An empty key carries nothing and the call is balanced round
// robin.
func WithStickyKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, stickyKeyCtx{}, key)
}

// StickyKey returns the key set by [WithStickyKey], or "" when there is none.
// It is the default key function of [Sticky].
func StickyKey(ctx context.Context) string {
	key, _ := ctx.Value(stickyKeyCtx{}).(string)
	return key
}

// NonIdempotent returns a copy of ctx that marks the request as not safe to
// repeat. The endpoint returned by [NewRetry] retries such a request only
// when the failed attempt provably never reached an instance ([NotSent]).
func NonIdempotent(ctx context.Context) context.Context {
	return context.WithValue(ctx, nonIdempotentCtx{}, true)
}

// IsNonIdempotent reports whether ctx was marked by [NonIdempotent].
func IsNonIdempotent(ctx context.Context) bool {
	v, _ := ctx.Value(nonIdempotentCtx{}).(bool)
	return v
}
