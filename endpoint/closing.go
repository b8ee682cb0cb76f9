package endpoint

// ClosingHeader is the response header a draining provider sets on every
// response once its stop sequence has begun. A client that sees it stops
// picking that instance; the response itself is still valid.
const ClosingHeader = "Gracekit-Closing"

// ClosingValue is the value of ClosingHeader.
const ClosingValue = "1"
