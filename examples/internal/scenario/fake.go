package scenario

import (
	"sync/atomic"
	"time"

	"github.com/geminiguard/geminiguard/geminitest"
)

// FakeModels returns sc's models as the fake serves them in a run that
// starts at start, every request decided by sc.Script (examples/replay
// records a Client against them). Calls must send Prompt(i).
func (sc *Scenario) FakeModels(start time.Time) []geminitest.Model {
	return sc.fakeModels(start, new(atomic.Int64))
}
