package rootfetch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/folbricht/desync"
	"github.com/sirupsen/logrus"
)

// Why our own assembly and not desync's AssembleFile: AssembleFile walks the index in order and
// asks one store for each chunk. In a boot storm every node would then want the same chunks at
// the same moment, none would hold them yet, and all would take them from bootd: N times the
// image through its one link. Here each node takes the chunks in its own random order, from a
// peer whose have-map lists the chunk, and from bootd only the chunks no peer holds, a few at a
// time: bootd's link carries each chunk about once and the nodes pass them on. desync still
// does the format: the index, each chunk's check, the HTTP chunk store layout.

const (
	// peerInflight bounds the requests a node has at one peer at once, so that a storm spreads
	// over the peers instead of piling onto the first.
	peerInflight = 4
	// scanWindow bounds how many pending chunks one pick looks at.
	scanWindow = 256
	// bootdRetries is how often a chunk is asked of bootd before the fetch gives up (and the
	// node falls back to the whole file).
	bootdRetries = 3
)

// peer is a source with what its have-map says it holds and fetches.
type peer struct {
	*source
	have     atomic.Pointer[[]byte] // the two bitmaps over the index's positions (have.go)
	inflight int                    // under assembler.mu
	hash     uint64                 // its place in the bootd-share (owner)
	// While it cannot be reached it is set aside until then, for longer each time (backoff).
	until   time.Time
	backoff time.Duration
}

// lie marks what a peer did wrong on purpose or by a fault that waiting does not cure: a chunk
// whose bytes are not its id, a chunk its have-map listed and it did not have, a have-map of
// another size than the index's. Such a peer is dropped for good; one that merely cannot be
// reached now (a lost SYN on a full link, an overloaded node) is set aside and tried again.
type lie struct{ error }

func isLie(err error) bool {
	var l lie
	var bad desync.ChunkInvalid
	return errors.As(err, &l) || errors.As(err, &bad)
}

func (p *peer) bit(half, pos int) bool {
	h := p.have.Load()
	if h == nil {
		return false
	}
	at := half*len(*h)/2 + pos/8
	return (*h)[at]&(1<<(pos%8)) != 0
}

func (p *peer) holds(pos int) bool    { return p.bit(0, pos) }
func (p *peer) fetching(pos int) bool { return p.bit(1, pos) }

// nodeHash places a node (by the chunk store URL its peers know it by) among the owners.
func nodeHash(url string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(url))
	return h.Sum64()
}

// score ranks node for chunk id (rendezvous hashing): the node with the highest score owns it.
func score(node uint64, id desync.ChunkID) uint64 {
	x := node ^ binary.LittleEndian.Uint64(id[:8])
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// chunkState is where one distinct chunk of the index stands.
type chunkState uint8

const (
	pending chunkState = iota
	inflight
	done
)

type assembler struct {
	ctx   context.Context
	idx   desync.Index
	out   *os.File
	have  *haveMap
	log   logrus.FieldLogger
	bootd *source

	ids       []desync.ChunkID // distinct chunks
	positions [][]int          // each one's positions in the index
	first     map[desync.ChunkID]int

	mu            sync.Mutex
	cond          *sync.Cond
	state         []chunkState
	pending       []int // distinct chunks not done, in this node's random order
	remaining     int
	peers         []*peer // live
	all           []*peer
	asleep        []*peer // set aside for a while: could not be reached
	dropped       []string
	suspensions   int
	bootdInflight int
	bootdSlots    int
	err           error
	// self places this node among the owners (0: no owners, every chunk is this node's to take
	// from bootd); mine says which chunks it owns among itself and its live peers: each chunk
	// has one owner that takes it from bootd, the others wait for it to hold it.
	self uint64
	mine []bool
}

func newAssembler(ctx context.Context, idx desync.Index, out *os.File, have *haveMap, bootd *source, log logrus.FieldLogger) *assembler {
	a := &assembler{ctx: ctx, idx: idx, out: out, have: have, bootd: bootd, log: log, first: map[desync.ChunkID]int{}}
	a.cond = sync.NewCond(&a.mu)
	for pos, c := range idx.Chunks {
		i, ok := a.first[c.ID]
		if !ok {
			i = len(a.ids)
			a.first[c.ID] = i
			a.ids = append(a.ids, c.ID)
			a.positions = append(a.positions, nil)
		}
		a.positions[i] = append(a.positions[i], pos)
	}
	a.state = make([]chunkState, len(a.ids))
	a.mine = make([]bool, len(a.ids))
	a.pending = rand.Perm(len(a.ids))
	a.remaining = len(a.ids)
	return a
}

// write puts a checked chunk at every position of the index that holds it, and marks them held.
func (a *assembler) write(i int, b []byte) error {
	for _, pos := range a.positions[i] {
		c := a.idx.Chunks[pos]
		if _, err := a.out.WriteAt(b, int64(c.Start)); err != nil {
			return err
		}
		a.have.set(pos)
	}
	return nil
}

// fromSeeds copies every chunk a seed holds, each checked against its id; a chunk whose seed
// bytes do not check out (a damaged cache) is left to the sources. It returns the bytes copied.
func (a *assembler) fromSeeds(seeds []seed) int64 {
	var n int64
	for _, s := range seeds {
		for i, id := range a.ids {
			if a.state[i] == done {
				continue
			}
			c, ok := s.pos[id]
			if !ok {
				continue
			}
			b := make([]byte, c.Size)
			if _, err := s.f.ReadAt(b, int64(c.Start)); err != nil {
				continue
			}
			if desync.Digest.Sum(b) != id {
				continue
			}
			if err := a.write(i, b); err != nil {
				continue
			}
			a.state[i] = done
			a.remaining--
			n += int64(len(b)) * int64(len(a.positions[i]))
		}
	}
	return n
}

// job is one chunk to get from one source.
type job struct {
	i   int
	src *source
	p   *peer // nil: bootd
}

// next returns the next chunk to fetch and where from, waiting while every source is busy; ok
// is false once everything is done or the fetch failed.
func (a *assembler) next() (job, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		if a.remaining == 0 || a.err != nil || a.ctx.Err() != nil {
			return job{}, false
		}
		if j, ok := a.pickLocked(); ok {
			return j, true
		}
		a.cond.Wait()
	}
}

// pickLocked looks, from a random place in the pending list, for a chunk some live peer with a
// free slot holds; failing that, while bootd has a free slot, for a chunk no peer holds.
func (a *assembler) pickLocked() (job, bool) {
	a.compactLocked()
	n := len(a.pending)
	if n == 0 {
		return job{}, false
	}
	// Peers first, each from its own random start.
	order := rand.Perm(len(a.peers))
	for _, pi := range order {
		p := a.peers[pi]
		if p.inflight >= peerInflight {
			continue
		}
		start := rand.IntN(n)
		for k := 0; k < min(n, scanWindow); k++ {
			i := a.pending[(start+k)%n]
			if a.state[i] == pending && p.holds(a.positions[i][0]) {
				a.state[i], p.inflight = inflight, p.inflight+1
				return job{i: i, src: p.source, p: p}, true
			}
		}
	}
	if a.bootdInflight >= a.bootdSlots {
		return job{}, false
	}
	// From bootd: a chunk this node owns, else one nobody in view holds or is fetching.
	start := rand.IntN(n)
	spare := -1
	for k := 0; k < min(n, scanWindow); k++ {
		i := a.pending[(start+k)%n]
		if a.state[i] != pending || a.anyPeerHasLocked(a.positions[i][0]) {
			continue
		}
		if a.mine[i] {
			return a.fromBootdLocked(i), true
		}
		if spare < 0 {
			spare = i
		}
	}
	if spare >= 0 && !a.anyPeerFreeLocked() {
		return a.fromBootdLocked(spare), true
	}
	// Every chunk in view is held by busy peers: take one from bootd rather than sit idle when
	// bootd has room, but only when the peers are all busy.
	if spare < 0 && !a.anyPeerFreeLocked() {
		for k := 0; k < min(n, scanWindow); k++ {
			if i := a.pending[(start+k)%n]; a.state[i] == pending {
				return a.fromBootdLocked(i), true
			}
		}
	}
	return job{}, false
}

func (a *assembler) fromBootdLocked(i int) job {
	a.state[i] = inflight
	a.bootdInflight++
	a.have.fetching(a.positions[i][0], true)
	return job{i: i, src: a.bootd}
}

// anyPeerHasLocked: some live peer holds the chunk at pos, or is fetching it from bootd.
func (a *assembler) anyPeerHasLocked(pos int) bool {
	for _, p := range a.peers {
		if p.holds(pos) || p.fetching(pos) {
			return true
		}
	}
	return false
}

// ownLocked recomputes which chunks this node owns among itself and its live peers.
func (a *assembler) ownLocked() {
	for i, id := range a.ids {
		if a.self == 0 {
			a.mine[i] = true
			continue
		}
		best := score(a.self, id)
		a.mine[i] = true
		for _, p := range a.peers {
			if score(p.hash, id) > best {
				a.mine[i] = false
				break
			}
		}
	}
}

func (a *assembler) anyPeerFreeLocked() bool {
	for _, p := range a.peers {
		if p.inflight < peerInflight && p.have.Load() != nil {
			return true
		}
	}
	return false
}

// compactLocked drops finished chunks from the pending list once they are half of it.
func (a *assembler) compactLocked() {
	if len(a.pending) < 2*a.remaining+64 {
		return
	}
	kept := a.pending[:0]
	for _, i := range a.pending {
		if a.state[i] != done {
			kept = append(kept, i)
		}
	}
	a.pending = kept
}

// finish records a job's outcome.
func (a *assembler) finish(j job, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if j.p != nil {
		j.p.inflight--
	} else {
		a.bootdInflight--
		if !ok {
			a.have.fetching(a.positions[j.i][0], false)
		}
	}
	if ok {
		a.state[j.i] = done
		a.remaining--
	} else {
		a.state[j.i] = pending
	}
	a.cond.Broadcast()
}

func (a *assembler) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = err
	}
	a.cond.Broadcast()
}

// failed handles a peer's failure: a lie drops it for good; anything else sets it aside for a
// while (5 s, doubling up to a minute), its chunks owned by the others meanwhile.
func (a *assembler) failed(p *peer, why error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer a.cond.Broadcast()
	i := slices.Index(a.peers, p)
	if i < 0 {
		return
	}
	a.peers = slices.Delete(a.peers, i, i+1)
	defer a.ownLocked()
	if isLie(why) {
		a.dropped = append(a.dropped, p.base)
		a.log.WithFields(logrus.Fields{"peer": p.base, "problem": why.Error()}).Warn("peer dropped for lying; its chunks come from others or bootd")
		return
	}
	p.backoff = min(max(2*p.backoff, 5*time.Second), time.Minute)
	p.until = time.Now().Add(p.backoff)
	a.asleep = append(a.asleep, p)
	a.suspensions++
	a.log.WithFields(logrus.Fields{"peer": p.base, "problem": why.Error(), "retry_in": p.backoff.String()}).Info("peer set aside")
}

// wake returns the peers set aside whose time has come, for a have-map request.
func (a *assembler) wake(now time.Time) []*peer {
	a.mu.Lock()
	defer a.mu.Unlock()
	var due []*peer
	kept := a.asleep[:0]
	for _, p := range a.asleep {
		if now.After(p.until) {
			due = append(due, p)
		} else {
			kept = append(kept, p)
		}
	}
	a.asleep = kept
	return due
}

// revive puts a peer that answered again among the live ones.
func (a *assembler) revive(p *peer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.peers = append(a.peers, p)
	a.ownLocked()
	a.cond.Broadcast()
}

// worker fetches chunks until none is left.
func (a *assembler) worker() {
	for {
		j, ok := a.next()
		if !ok {
			return
		}
		a.finish(j, a.fetch(j))
	}
}

// fetch gets one chunk from its source, checks it and writes it.
func (a *assembler) fetch(j job) bool {
	id := a.ids[j.i]
	tries := 1
	if j.p == nil {
		tries = bootdRetries
	}
	var c *desync.Chunk
	var err error
	for t := 0; t < tries; t++ {
		if c, err = j.src.get(a.ctx, id); err == nil || a.ctx.Err() != nil {
			break
		}
		if j.p == nil && t+1 < tries {
			time.Sleep(time.Duration(t+1) * 500 * time.Millisecond)
		}
	}
	if err != nil {
		if a.ctx.Err() != nil {
			return false
		}
		if j.p != nil {
			if errors.Is(err, errMissing) {
				err = lie{fmt.Errorf("its have-map lists chunk %s, which it does not serve", id)}
			}
			a.failed(j.p, err)
			return false
		}
		a.fail(fmt.Errorf("chunk %s from bootd: %w", id, err))
		return false
	}
	b, err := c.Data()
	if err == nil {
		err = a.write(j.i, b)
	}
	if err != nil {
		a.fail(err)
		return false
	}
	return true
}

// run fetches every chunk not yet done with n workers, while the peers' have-maps are polled.
func (a *assembler) run(n int, poll func(ctx context.Context)) error {
	ctx, cancel := context.WithCancel(a.ctx)
	defer cancel()
	go poll(ctx)
	// Wake waiting workers now and then: a have-map may have changed.
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				a.mu.Lock()
				a.cond.Broadcast()
				a.mu.Unlock()
			}
		}
	}()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.worker()
		}()
	}
	wg.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	if err := a.ctx.Err(); err != nil {
		return err
	}
	if a.remaining != 0 {
		return fmt.Errorf("%d chunks left", a.remaining)
	}
	return nil
}

// seed is an image the node holds, with its chunks' places.
type seed struct {
	f   *os.File
	pos map[desync.ChunkID]desync.IndexChunk
}

func openSeed(s Seed) (seed, error) {
	f, err := os.Open(s.Index)
	if err != nil {
		return seed{}, err
	}
	idx, err := desync.IndexFromReader(io.LimitReader(f, maxIndex))
	f.Close()
	if err != nil {
		return seed{}, fmt.Errorf("seed index %s: %w", s.Index, err)
	}
	img, err := os.Open(s.File)
	if err != nil {
		return seed{}, err
	}
	pos := make(map[desync.ChunkID]desync.IndexChunk, len(idx.Chunks))
	for _, c := range idx.Chunks {
		pos[c.ID] = c
	}
	return seed{f: img, pos: pos}, nil
}
