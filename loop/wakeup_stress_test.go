package loop_test

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// TestLostWakeupStress races outside Executes against the loop entering its
// wait (docs/loop.md, "Wakeup protocol"). The work comes in rounds: in each, several producers
// submit a small burst, then nobody submits until every task of the round
// has run, so a lost wakeup cannot be covered up by a later Execute: the
// round's last task would sit in the queue until the loop's idle timeout
// (up to 1 s). Each producer starts its burst at a different moment of the
// loop's descent into its wait, which begins as the previous round's last
// task runs: at once, after a short spin, after a yield, after a short
// sleep, or the instant the loop has published its wait deadline. Every task
// must run exactly once, in its producer's order, no later than maxLatency
// after its Execute.
func TestLostWakeupStress(t *testing.T) {
	const (
		producers  = 4
		maxBurst   = 32
		maxLatency = 200 * time.Millisecond
	)
	// A million tasks per backend take about 5 s on two cores, with or
	// without -race; on a slower or busier machine the rounds stop at the
	// budget (per backend), so the test stays near 15 s, and say so.
	total := 1_000_000
	budget := 7500 * time.Millisecond
	if testing.Short() {
		total /= 10
	}
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		// Read on the loop, where no sleep is in progress: read from
		// elsewhere, the snapshot could count a sleep whose eventfd write
		// comes after it, and the differences below would show one write
		// more than the sleeps.
		var before loop.Stats
		runOn(t, l, func() { before = l.Stats() })
		base := time.Now()

		// Loop-goroutine state (tasks run one at a time, on the loop).
		var (
			next      [producers]int // next sequence number expected per producer
			ran       int
			badSeq    int
			late      int
			worst     time.Duration
			roundDone = make(chan struct{}, 1)
			target    atomic.Int64 // the value of ran that ends the current round
		)
		run := func(p, seq int, sent time.Duration) {
			d := time.Since(base) - sent
			worst = max(worst, d)
			if d > maxLatency {
				late++
			}
			if seq != next[p] {
				badSeq++
			}
			next[p] = seq + 1
			ran++
			if ran == int(target.Load()) {
				roundDone <- struct{}{}
			}
		}

		type order struct{ burst, mode int }
		orders := make([]chan order, producers)
		var wg sync.WaitGroup
		for p := range producers {
			orders[p] = make(chan order, 1)
			go func() {
				rng := rand.New(rand.NewPCG(uint64(p), 7))
				seq := 0
				for o := range orders[p] {
					switch o.mode {
					case 0: // at once
					case 1:
						for range rng.IntN(4000) {
							_ = rng.Uint64() // spin a little
						}
					case 2:
						runtime.Gosched()
					case 3:
						time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
					default:
						// The window between publishing the deadline and
						// blocking.
						for spins := 0; !l.Waiting() && spins < 200; spins++ {
							runtime.Gosched()
						}
					}
					for range o.burst {
						s := seq
						sent := time.Since(base)
						if err := l.Execute(func() { run(p, s, sent) }); err != nil {
							t.Errorf("producer %d Execute %d: %v", p, s, err)
						}
						seq++
					}
					wg.Done()
				}
			}()
		}
		defer func() {
			for _, c := range orders {
				close(c)
			}
		}()

		rng := rand.New(rand.NewPCG(1, 2))
		started := time.Now()
		submitted, rounds := 0, 0
		for submitted < total && time.Since(started) < budget {
			var burst [producers]int
			n := 0
			for p := range producers {
				burst[p] = min(rng.IntN(maxBurst+1), total-submitted-n)
				n += burst[p]
			}
			if n == 0 {
				continue
			}
			submitted += n
			target.Store(int64(submitted))
			wg.Add(producers)
			for p := range producers {
				orders[p] <- order{burst: burst[p], mode: rng.IntN(6)}
			}
			wg.Wait()
			select {
			case <-roundDone:
			case <-time.After(2 * time.Second):
				t.Fatalf("round %d: tasks submitted %d, not all ran within 2s", rounds, submitted)
			}
			rounds++
		}
		var got, bad, lateN int
		var worstSeen time.Duration
		var s loop.Stats
		runOn(t, l, func() {
			got, bad, lateN, worstSeen = ran, badSeq, late, worst
			s = l.Stats()
		})
		sleeps, writes := s.Sleeps-before.Sleeps, s.WakeWrites-before.WakeWrites
		t.Logf("%d tasks in %d rounds from %d producers in %v: worst latency %v, loop slept %d times, %d eventfd writes",
			submitted, rounds, producers, time.Since(started).Round(time.Millisecond), worstSeen, sleeps, writes)
		if submitted < total {
			t.Logf("time budget of %v reached after %d of %d tasks", budget, submitted, total)
		}
		if got != submitted || bad != 0 {
			t.Fatalf("ran %d of %d tasks, %d out of sequence (lost, duplicated or reordered)", got, submitted, bad)
		}
		if lateN > 0 {
			t.Fatalf("%d tasks ran more than %v after their Execute (worst %v): a wakeup was lost", lateN, maxLatency, worstSeen)
		}
		if writes > sleeps {
			t.Fatalf("%d eventfd writes for %d sleeps", writes, sleeps)
		}
		if sleeps < uint64(rounds/4) {
			t.Fatalf("the loop slept %d times in %d rounds: the stress did not race its wait", sleeps, rounds)
		}
	})
}
