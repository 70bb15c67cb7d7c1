package dispatcher

import "time"

// pool runs jobs on goroutines that outlive one job. A delivery goes deep
// (HTTP client, JetStream publish) and a fresh goroutine grows its stack on
// every one — ~5% of the CPU of an event in make bench. Idle workers wait
// for the next job for idleFor, then exit, so the pool shrinks back when
// load drops. Concurrency is bounded by the readers' slots, not here.
type pool struct {
	jobs    chan func()
	quit    chan struct{}
	idleFor time.Duration
}

func newPool(idleFor time.Duration) *pool {
	return &pool{jobs: make(chan func()), quit: make(chan struct{}), idleFor: idleFor}
}

// stop makes idle workers exit; call it once no more jobs come.
func (p *pool) stop() { close(p.quit) }

// Go runs f on an idle worker, or on a new one if none is idle.
func (p *pool) Go(f func()) {
	select {
	case p.jobs <- f:
	default:
		go p.worker(f)
	}
}

func (p *pool) worker(f func()) {
	t := time.NewTimer(p.idleFor)
	defer t.Stop()
	for {
		f()
		t.Reset(p.idleFor)
		select {
		case f = <-p.jobs:
		case <-t.C:
			return
		case <-p.quit:
			return
		}
	}
}
