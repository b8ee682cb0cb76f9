//go:build gracekit_mutant_nozxid

package sd

// mutantNoZxid plants a bug (see mutant.go) with zkwire's of the same tag:
// the recursive feed's fence against a re-read from behind is off too, since
// either of the two hides the other's absence.
const mutantNoZxid = true
