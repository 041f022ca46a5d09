package sched

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestQueueFIFOAcrossChunks(t *testing.T) {
	q := NewQueue(0)
	if q.Pop() != nil {
		t.Fatal("Pop on an empty queue returned a task")
	}
	const n = 3*1024 + 17
	var got []int
	for i := range n {
		if err := q.Push(TaskFunc(func() { got = append(got, i) })); err != nil {
			t.Fatal(err)
		}
	}
	if q.Len() != n {
		t.Fatalf("Len = %d, want %d", q.Len(), n)
	}
	q.Pop().Run()
	if ran := q.Drain(10, func(t Task) { t.Run() }); ran != 10 {
		t.Fatalf("Drain(10) = %d", ran)
	}
	q.Drain(0, func(t Task) { t.Run() })
	for i, v := range got {
		if v != i {
			t.Fatalf("task %d ran in position %d", v, i)
		}
	}
	if len(got) != n || q.Len() != 0 || q.Pop() != nil {
		t.Fatalf("ran %d of %d, Len %d", len(got), n, q.Len())
	}
}

func TestQueueRejectsNil(t *testing.T) {
	q := NewQueue(0)
	if err := q.Push(nil); err != ErrNilTask {
		t.Fatalf("Push(nil) = %v", err)
	}
	if err := q.Push(TaskFunc(nil)); err != ErrNilTask {
		t.Fatalf("Push(TaskFunc(nil)) = %v", err)
	}
	if q.Len() != 0 {
		t.Fatal("a nil task was queued")
	}
}

func TestQueueBound(t *testing.T) {
	q := NewQueue(3)
	if q.Limit() != 3 || NewQueue(-1).Limit() != 0 {
		t.Fatal("Limit")
	}
	ran := 0
	task := TaskFunc(func() { ran++ })
	for range 3 {
		if err := q.Push(task); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Push(task); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Push beyond the bound = %v, want ErrQueueFull", err)
	}
	q.Pop().Run()
	if err := q.Push(task); err != nil {
		t.Fatalf("Push after a Pop = %v", err)
	}
	if q.Drain(0, func(t Task) { t.Run() }) != 3 || ran != 4 {
		t.Fatalf("ran %d tasks, want 4", ran)
	}
}

// Drain publishes space every drainPublishEvery tasks, so a long batch does
// not starve producers of a bounded queue.
func TestQueueDrainFreesSpaceDuringBatch(t *testing.T) {
	q := NewQueue(drainPublishEvery)
	refused := 0
	var fill Task
	fill = TaskFunc(func() {
		if q.Push(fill) != nil {
			refused++
		}
	})
	for range drainPublishEvery {
		if err := q.Push(fill); err != nil {
			t.Fatal(err)
		}
	}
	q.Drain(10*drainPublishEvery, func(t Task) { t.Run() })
	if refused >= drainPublishEvery {
		t.Fatalf("%d pushes refused during a batch", refused)
	}
}

// A bounded queue counts tasks not yet taken: while the consumer runs a
// task (which may block), exactly limit tasks can be queued behind it, and
// the one after is refused.
func TestQueueBoundExcludesRunningTask(t *testing.T) {
	const limit = 3 * drainPublishEvery / 2
	q := NewQueue(limit)
	bad := 0
	var task Task
	task = TaskFunc(func() {
		if q.Push(task) != nil {
			bad++ // the slot of the running task is free
		}
		if q.Push(task) == nil {
			bad++ // but no other
		}
	})
	for range limit {
		if err := q.Push(task); err != nil {
			t.Fatal(err)
		}
	}
	if n := q.Drain(2*limit, func(t Task) { t.Run() }); n != 2*limit || bad != 0 {
		t.Fatalf("drained %d tasks, %d pushes against the bound of %d", n, bad, limit)
	}
	if q.Len() != limit {
		t.Fatalf("Len %d, want %d", q.Len(), limit)
	}
	// Pop publishes as it takes, too.
	q.Pop()
	if err := q.Push(TaskFunc(func() {})); err != nil {
		t.Fatalf("Push after a Pop: %v", err)
	}
}

// seqTask records its producer and position when run.
type seqTask struct {
	p, i int32
	seen *[][]bool
	last []int32
	bad  *int
}

func (s *seqTask) Run() {
	if s.last[s.p] >= s.i {
		*s.bad++
	}
	s.last[s.p] = s.i
	(*s.seen)[s.p][s.i] = true
}

// stressQueue pushes perProducer tasks from each of producers goroutines
// while the test goroutine consumes, and checks that exactly the accepted
// tasks ran, once each, in each producer's order. With a bound the consumer
// starts only once a push has been refused, so rejections are certain; a
// producer retries a refused even-numbered task and drops an odd one.
func stressQueue(t *testing.T, producers, perProducer, limit int) {
	q := NewQueue(limit)
	seen := make([][]bool, producers)
	accepted := make([][]bool, producers)
	last := make([]int32, producers)
	bad := 0
	tasks := make([][]seqTask, producers)
	for p := range producers {
		seen[p] = make([]bool, perProducer)
		accepted[p] = make([]bool, perProducer)
		last[p] = -1
		tasks[p] = make([]seqTask, perProducer)
		for i := range tasks[p] {
			tasks[p][i] = seqTask{p: int32(p), i: int32(i), seen: &seen, last: last, bad: &bad}
		}
	}
	var rejected atomic.Int64
	var done atomic.Int32
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done.Add(1)
			for i := 0; i < perProducer; i++ {
				switch err := q.Push(&tasks[p][i]); err {
				case nil:
					accepted[p][i] = true
				case ErrQueueFull:
					rejected.Add(1)
					if i%2 == 0 {
						i-- // retry even tasks later, give up odd ones
						runtime.Gosched()
					}
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	if limit > 0 {
		for rejected.Load() == 0 && done.Load() < int32(producers) {
			runtime.Gosched()
		}
	}
	run := func(t Task) { t.Run() }
	for {
		finished := done.Load() == int32(producers) // read before draining
		if q.Drain(0, run) == 0 {
			if finished && q.Len() == 0 {
				break
			}
			runtime.Gosched()
		}
	}
	wg.Wait()
	if bad != 0 {
		t.Fatalf("%d tasks ran out of their producer's order", bad)
	}
	ran := 0
	for p := range producers {
		for i := range perProducer {
			if seen[p][i] != accepted[p][i] {
				t.Fatalf("producer %d task %d: accepted %v, ran %v", p, i, accepted[p][i], seen[p][i])
			}
			if seen[p][i] {
				ran++
			}
		}
	}
	if limit == 0 && ran != producers*perProducer {
		t.Fatalf("ran %d of %d", ran, producers*perProducer)
	}
	if limit > 0 && (rejected.Load() == 0 || ran < producers*perProducer/2) {
		t.Fatalf("bounded queue: %d rejections, %d tasks ran", rejected.Load(), ran)
	}
	t.Logf("producers=%d tasks=%d limit=%d ran=%d rejected=%d", producers, producers*perProducer, limit, ran, rejected.Load())
}

func TestQueueStress(t *testing.T) {
	per := 100_000
	if testing.Short() {
		per = 10_000
	}
	t.Run("unbounded", func(t *testing.T) { stressQueue(t, 8, per, 0) })
	t.Run("bounded", func(t *testing.T) { stressQueue(t, 8, per, 256) })
}

// countingClock is a ManualClock that counts its reads.
type countingClock struct {
	ManualClock
	reads atomic.Int64
}

func (c *countingClock) Now() int64 {
	c.reads.Add(1)
	return c.ManualClock.Now()
}

// With a clock, the push that starts a batch stamps it (one clock read per
// batch), the consumer reports the batches it took since it last asked
// with the stamps of the first two, and PushAt stamps with the time given,
// reading nothing.
func TestQueueBatchesTaken(t *testing.T) {
	clk := &countingClock{}
	q := NewQueue(0)
	q.SetClock(clk)
	run := func(t Task) { t.Run() }
	nop := TaskFunc(func() {})
	if n, _, _ := q.BatchesTaken(); n != 0 {
		t.Fatalf("BatchesTaken on a fresh queue: %d", n)
	}
	clk.Set(100)
	for range 10 {
		if err := q.Push(nop); err != nil {
			t.Fatal(err)
		}
		clk.Advance(5)
	}
	if n := clk.reads.Load(); n != 1 {
		t.Fatalf("10 pushes of one batch read the clock %d times, want 1", n)
	}
	if n, _, _ := q.BatchesTaken(); n != 0 {
		t.Fatalf("BatchesTaken before any take: %d", n)
	}
	q.Drain(3, run) // takes the whole batch, runs 3
	// Two more batches, taken by the Drain below after the first.
	clk.Set(500)
	if err := q.Push(nop); err != nil {
		t.Fatal(err)
	}
	q.Drain(8, run)
	clk.Set(900)
	if err := q.Push(nop); err != nil {
		t.Fatal(err)
	}
	q.Drain(0, run)
	if n, first, second := q.BatchesTaken(); n != 3 || first != 100 || second != 500 {
		t.Fatalf("BatchesTaken = %d, %d, %d; want 3, 100, 500", n, first, second)
	}
	if n, _, _ := q.BatchesTaken(); n != 0 {
		t.Fatalf("BatchesTaken twice: %d the second time", n)
	}
	reads := clk.reads.Load()
	if err := q.PushAt(nop, 42); err != nil {
		t.Fatal(err)
	}
	if err := q.PushAt(nil, 42); err != ErrNilTask {
		t.Fatalf("PushAt(nil) = %v", err)
	}
	if q.Pop() == nil {
		t.Fatal("Pop after PushAt: nil")
	}
	if n, first, _ := q.BatchesTaken(); n != 1 || first != 42 || clk.reads.Load() != reads {
		t.Fatalf("after PushAt(42): BatchesTaken = %d, %d, %d clock reads; want 1, 42, none",
			n, first, clk.reads.Load()-reads)
	}
}

// Without a clock a queue reads none and reports no batch.
func TestQueueWithoutClockStampsNothing(t *testing.T) {
	q := NewQueue(0)
	if err := q.PushAt(TaskFunc(func() {}), 7); err != nil {
		t.Fatal(err)
	}
	q.Drain(0, func(t Task) { t.Run() })
	if n, _, _ := q.BatchesTaken(); n != 0 {
		t.Fatalf("BatchesTaken on a queue without a clock: %d", n)
	}
}
