//go:build !gracekit_failpoints

package failpoint

// Enabled tells whether the build has the gracekit_failpoints tag.
const Enabled = false

// Inject does nothing in a build without the gracekit_failpoints tag.
func Inject(string) {}
