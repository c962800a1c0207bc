package geminitest

import (
	"math/rand/v2"
	"slices"
)

// modelState is a model and what the server remembers about it. Every field
// is guarded by the owning Server's mu.
type modelState struct {
	m     Model // with defaults applied
	pos   int   // index of the next Script step
	n     int   // requests admitted so far: Decide's index
	rng   *rand.Rand
	quota quotaState
}

func newModelState(m Model) *modelState {
	m = m.withDefaults()
	m.Script = slices.Clone(m.Script)
	m.Faults = slices.Clone(m.Faults)
	return &modelState{m: m, rng: newRand(m.Seed)}
}

func newRand(seed int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0))
}

// rewind forgets everything the model has served: script position, draws,
// request index and quota usage.
func (st *modelState) rewind() {
	st.pos, st.n, st.rng, st.quota = 0, 0, newRand(st.m.Seed), quotaState{}
}

// next picks the step for the next admitted request. When the model has a
// Decide func it returns it instead, with the request's index, for the
// caller to call once the lock is released.
func (st *modelState) next() (step Step, idx int, decide func(Request, int) Step) {
	idx = st.n
	st.n++
	if st.m.Decide != nil {
		return Step{}, idx, st.m.Decide
	}
	if st.pos < len(st.m.Script) {
		st.pos++
		return st.m.Script[st.pos-1], idx, nil
	}
	draw, cum := st.rng.Float64(), 0.0
	for _, c := range st.m.Faults {
		cum += c.P
		if draw < cum {
			return c.Step, idx, nil
		}
	}
	return Step{}, idx, nil
}
