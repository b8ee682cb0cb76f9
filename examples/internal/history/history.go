package history

import (
	"time"
)

// Key identifies one registration: a node's path and creation zxid.
type Key struct {
	Path  string `json:"path"`
	Czxid int64  `json:"czxid"`
}

// Kind is what a Change did to a registration.
type Kind string

// The kinds of change.
const (
	Created Kind = "created"
	Changed Kind = "changed" // its data: the status may have changed
	Deleted Kind = "deleted"
)

// Change is one change of an instance node, as the truth recorder saw it.
type Change struct {
	At      time.Time `json:"at"`
	Kind    Kind      `json:"kind"`
	Key     Key       `json:"key"`
	Zxid    int64     `json:"zxid,omitempty"` // czxid (created), mzxid (changed); 0 for deleted (a watcher is not told)
	Service string    `json:"service"`
	ID      string    `json:"id"`
	Addr    string    `json:"addr"`              // host:port the node names
	Up      bool      `json:"up"`                // status UP after the change; false when deleted
	Drained bool      `json:"drained,omitempty"` // drained by an operator (sd.MetadataDrainedBy set) after the change
	Owner   int64     `json:"owner,omitempty"`
	// Registered is the registration time the node names
	// (registrationTimeUTC), zero when it names none.
	Registered time.Time `json:"registered,omitzero"`
}

// Gap is a time the truth recorder could not read ZooKeeper: a change
// made and undone inside it may be missing from the truth.
type Gap struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// Member is one instance in a consumer's published set.
type Member struct {
	ID    string `json:"id,omitempty"`
	Addr  string `json:"addr"`
	Czxid int64  `json:"czxid,omitempty"` // 0 when the consumer does not say
}

// Publish is one set a consumer published for a service: the complete set.
type Publish struct {
	At       time.Time `json:"at"`
	Consumer string    `json:"consumer"`
	Service  string    `json:"service"`
	Members  []Member  `json:"members"`
	Err      string    `json:"err,omitempty"` // the set is the last good one, kept while ZooKeeper is unreachable
}

// Heal is a time every fault of the schedule had ended: each consumer must
// converge on ZooKeeper's set within Bounds.Converge of it.
type Heal struct {
	At   time.Time `json:"at"`
	What string    `json:"what"` // the faults it ends
}

// Run is one life of a registered instance: a provider process from its
// start until it stopped, or a registration the driver made itself.
// Stopping is when its end began (SIGTERM, SIGKILL, a deregistration):
// from then on its node may go for good. Both zero: alive at the end.
type Run struct {
	Service  string    `json:"service"`
	ID       string    `json:"id"`
	Path     string    `json:"path"`
	Start    time.Time `json:"start"`
	Stopping time.Time `json:"stopping,omitzero"`
	How      string    `json:"how,omitempty"` // how it ended: sigterm, kill, deregister
}

// Blind is a fault that kept Target (a provider's or consumer's name, or
// "*" for everyone) from ZooKeeper from From to To.
type Blind struct {
	Target string    `json:"target"`
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	What   string    `json:"what"`
}

// Request is one request of the load.
type Request struct {
	At      time.Time `json:"at"`
	Done    time.Time `json:"done"`
	Gateway string    `json:"gateway"`
	// Instance is the id of the instance that served it (from its
	// answer); empty when it failed or the answer did not say.
	Instance string `json:"instance,omitempty"`
	Post     bool   `json:"post,omitempty"`
	Key      string `json:"key,omitempty"` // a POST's Idempotency-Key
	Failed   bool   `json:"failed,omitempty"`
	Reason   string `json:"reason,omitempty"`
	NoRetry  bool   `json:"no_retry,omitempty"` // through a gateway that retries nothing (grpc-go)
}

// Crash is a provider killed with SIGKILL at KillAt, dead at DeadAt,
// listening on Addr: what was in flight on it may fail.
type Crash struct {
	Addr   string    `json:"addr"`
	KillAt time.Time `json:"kill_at"`
	DeadAt time.Time `json:"dead_at"`
}

// Stop is a provider's graceful stop as its STOPREPORT told it: when it
// went OUT_OF_SERVICE, deregistered, and when each gateway acked its flush.
// Times are the provider's clock (the same machine's).
type Stop struct {
	Service      string    `json:"service"`
	ID           string    `json:"id"`
	Signal       time.Time `json:"signal"`       // when the driver sent SIGTERM
	Out          time.Time `json:"out,omitzero"` // OUT_OF_SERVICE written
	Deregistered time.Time `json:"deregistered,omitzero"`
	Acks         []Ack     `json:"acks,omitempty"` // one per flush target
}

// Ack is one flush target's answer to a stop's flush.
type Ack struct {
	Gateway string    `json:"gateway,omitempty"` // the gateway's id, when the target names one the driver ran
	Target  string    `json:"target"`
	Acked   bool      `json:"acked"`
	At      time.Time `json:"at,omitzero"` // when the ack came (or the target gave up)
}

// History is everything one schedule recorded.
type History struct {
	Seed           int64          `json:"seed"`
	Schedule       string         `json:"schedule,omitempty"` // the faults the seed drew
	Start          time.Time      `json:"start"`
	End            time.Time      `json:"end"`
	SessionTimeout time.Duration  `json:"session_timeout"`
	Truth          []Change       `json:"truth"`
	Gaps           []Gap          `json:"gaps,omitempty"`
	Publishes      []Publish      `json:"publishes"`
	Heals          []Heal         `json:"heals"`
	Runs           []Run          `json:"runs"`
	Blinds         []Blind        `json:"blinds,omitempty"`
	Requests       []Request      `json:"requests,omitempty"`
	Crashes        []Crash        `json:"crashes,omitempty"`
	Stops          []Stop         `json:"stops,omitempty"`
	Writes         []Written      `json:"writes,omitempty"`
	Guards         []Guard        `json:"guards,omitempty"`     // min-up steps: operators draining one service at once
	Sick           []Sick         `json:"sick,omitempty"`       // the schedule's health faults
	Ready          []ReadySample  `json:"ready,omitempty"`      // a drained provider's readiness, as the driver asked it
	Executions     map[string]int `json:"executions,omitempty"` // order key -> times a provider executed it
	SlowStart      *SlowStart     `json:"slow_start,omitempty"` // the gateways' ramp; nil: none is checked
	Restore        *Restore       `json:"restore,omitempty"`    // the schedule's last fault, if it restored the ensemble
	Calls          []Call         `json:"calls,omitempty"`      // library calls the driver bounded (lostreply steps)
}

// Bounds are the limits the validators hold the history to.
type Bounds struct {
	// Converge: a consumer shows ZooKeeper's set within it of a heal; a
	// published instance was UP in ZooKeeper within it before.
	Converge time.Duration
	// Reregister: a live provider whose session expired is registered
	// again within its session timeout plus this.
	Reregister time.Duration
	// Skew: how far apart two recorders may see one change.
	Skew time.Duration
	// Leave: how long after an instance stopped being UP in ZooKeeper
	// (deregistered, OUT_OF_SERVICE, drained) a gateway that can reach
	// ZooKeeper may still route to it. Zero: the run's session timeout.
	Leave time.Duration
	// Starve: how long a run that started may go without a call. Zero:
	// Converge plus twice the session timeout.
	Starve time.Duration
}

// DefaultBounds are fixed bounds for histories that carry no timeouts of
// their own (the validators' unit tests); a robustness run holds itself to
// RunBounds.
var DefaultBounds = Bounds{Converge: 10 * time.Second, Reregister: 10 * time.Second, Skew: time.Second}

// RunBounds are the bounds a run with this session timeout and this cap on
// the library's reconnect backoff is held to (`make chaos CHAOS_SEEDS=n`).
// After a heal a consumer may wait out one session timeout to learn that
// its connection is gone, then up to two backoffs (one jittered retry of
// the watch session, one of the write session) before it reads again;
// Skew covers the recorders' clocks. A provider whose session expired is
// registered again within the same bound past its session timeout.
func RunBounds(sessionTimeout, reconnect time.Duration) Bounds {
	const skew = time.Second
	converge := sessionTimeout + 2*reconnect + skew
	return Bounds{Converge: converge, Reregister: converge, Skew: skew}
}

// Violation is one thing the history shows broken.
type Violation struct {
	Check    string    `json:"check"` // convergence, resurrection, phantom, going-back, re-registration, requests
	At       time.Time `json:"at"`
	Consumer string    `json:"consumer,omitempty"`
	Service  string    `json:"service,omitempty"`
	What     string    `json:"what"`
}

// The checks' names, as Violation.Check says them.
const (
	CheckConvergence    = "convergence"
	CheckResurrection   = "resurrection"
	CheckPhantom        = "phantom"
	CheckGoingBack      = "going-back"
	CheckReregistration = "re-registration"
	CheckRequests       = "requests"
	CheckFlushAck       = "flush-ack"   // a request reached an instance after a gateway acked its flush
	CheckAfterLeave     = "after-leave" // a request reached an instance more than Bounds.Leave after it left ZooKeeper's UP set
	CheckFlushReach     = "flush-reach" // a stop's flush did not reach a gateway that routed to it
	CheckStarved        = "starved"     // a run got no call within Bounds.Starve
)

// Report is what the validators found.
type Report struct {
	Checks     int         `json:"checks"`     // assertions made
	Unverified int         `json:"unverified"` // assertions a truth gap kept from being made
	Violations []Violation `json:"violations"`
	Requests   int         `json:"requests"`
	Failed     int         `json:"failed"` // outside the crashes
	Duplicated int         `json:"duplicated"`
	// RestoreFailed is the requests that failed within a restore or its
	// bound after (History.restoring): not violations, said apart.
	RestoreFailed int `json:"restore_failed,omitempty"`
	// Slowest is the longest a consumer took to converge after a heal,
	// and SlowestBy which consumer and service it was.
	Slowest   time.Duration `json:"slowest"`
	SlowestBy string        `json:"slowest_by,omitempty"`
	// Leave and Starve are the bounds after-leave and starved held the
	// run to; Stops the graceful stops traced, Traced the requests that
	// name the instance that served them.
	Leave, Starve time.Duration
	Stops, Traced int
	// Changes is how fast consumers showed every change while connected.
	Changes Latency
	// ByCheck is how many assertions each validator made (Check only).
	ByCheck map[string]int `json:"by_check,omitempty"`
}

func (r *Report) add(o Report) {
	if o.Slowest > r.Slowest {
		r.Slowest, r.SlowestBy = o.Slowest, o.SlowestBy
	}
	r.Checks += o.Checks
	r.Unverified += o.Unverified
	r.Violations = append(r.Violations, o.Violations...)
	r.Requests += o.Requests
	r.Failed += o.Failed
	r.Duplicated += o.Duplicated
	r.RestoreFailed += o.RestoreFailed
}

// Check runs every validator over h. After a restore, zxids go back: the
// validators that read the truth's order see h up to the restore, and
// Restored checks what came after it; requests are counted to the end.
func Check(h *History, b Bounds) Report {
	full := h
	if h.Restore != nil {
		h = h.before(h.Restore.From)
	}
	t := NewTruth(h)
	r := Report{ByCheck: map[string]int{}, Leave: leave(h, b), Starve: starve(h, b), Stops: len(h.Stops)}
	for _, q := range full.Requests {
		if q.Instance != "" {
			r.Traced++
		}
	}
	r.Changes = ChangeLatency(h, t, b)
	for _, v := range []struct {
		name string
		r    Report
	}{
		{CheckConvergence, Convergence(h, t, b)},
		{CheckPhantom + "/" + CheckResurrection, PhantomsAndResurrections(h, t, b)},
		{CheckGoingBack, GoingBack(h, t, b)},
		{CheckReregistration, Reregistration(h, t, b)},
		{CheckRequests, Requests(full)},
		{CheckFlushAck, FlushAck(h, b)},
		{CheckAfterLeave, AfterLeave(h, t, b)},
		{CheckFlushReach, FlushReach(h)},
		{CheckStarved, Starved(h, b)},
		{CheckAgree, Agree(h, b)},
		{CheckWriteAck, WriteAck(h, t, b)},
		{CheckAfterDrain, AfterDrain(h, b)},
		{CheckMinUp, MinUp(h, t)},
		{CheckAfterSick, AfterSick(h, t, b)},
		{CheckDrainHeld, DrainHeld(h, t, b)},
		{CheckRamp, Ramp(h)},
		{CheckRestored, Restored(full, b)},
		{CheckBounded, Bounded(full, b)},
	} {
		r.ByCheck[v.name] = v.r.Checks
		r.add(v.r)
	}
	return r
}
