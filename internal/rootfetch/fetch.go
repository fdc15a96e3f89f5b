package rootfetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/folbricht/desync"
	"github.com/sirupsen/logrus"
)

// maxIndex bounds the index a node reads: 48 bytes a chunk, so 64 MiB is a root image of some
// 80 GiB at castr's average chunk size.
const maxIndex = 64 << 20

// Seed is a root image the node holds, with its index: chunks it shares with the new version are
// copied from it (and checked) instead of fetched.
type Seed struct {
	File, Index string
}

// Options say what to fetch, from where, with what.
type Options struct {
	Index       string   // URL of the version's index (.caibx)
	IndexSHA256 string   // its sha256, as bootd's verified manifest lists it: the trust root
	Store       string   // bootd's chunk store (URL)
	Peers       []string // other nodes' chunk stores (URLs); tried before bootd, dropped when they lie
	// PeerList, when set, is asked now and then for more peers (bootd's list: nodes that started
	// after this one).
	PeerList func(context.Context) []string
	// Self is this node's chunk store URL as its peers know it (bootd's list): it places the node
	// among the owners that share the chunks out of bootd. "" takes from bootd any chunk no peer
	// holds or fetches.
	Self   string
	Seeds  []Seed
	Output string // the image to write
	SHA256 string // the whole image's sha256 (rd.bootd.sha256)
	// HaveFile is where the node keeps its have-map for its chunk server ("": Output + ".have").
	HaveFile string
	// SharedOutput: other fetches write the same image into Output at once (bench/rootstorm's
	// nodes, which could not each hold a copy of the image on one machine); it is neither
	// truncated at the start nor emptied after a failure. Every node still receives and checks
	// every chunk it marks held.
	SharedOutput bool
	// Whole is the image's URL at bootd: the fallback when the chunked path fails.
	Whole string
	N     int // chunks in flight; 0: 16
	Log   logrus.FieldLogger
	// OnIndex, when set, is called with the checked index before the first chunk is written, and
	// the output file exists from then on (empty at first): a node starts serving its chunks
	// there (Serve) while it fetches.
	OnIndex func(desync.Index)
}

// Stats say where the image's bytes came from.
type Stats struct {
	Size                 int64
	FromSeeds            int64    // bytes copied from seeds (or already in place)
	FromBootd, FromPeers int64    // chunk bytes fetched
	PeersDropped         []string // for lying
	PeersSetAside        int      // times a peer could not be reached and was set aside a while
	// Cached is set when the node's cache disk held the image (nothing was fetched).
	Cached bool
	// Whole is set when the chunked path failed and the whole file was fetched instead; Why says why.
	Whole    bool
	Why      string
	Duration time.Duration
}

// Fetch writes the image to o.Output by chunks, and falls back to the whole file when that
// fails; either way the result's sha256 is checked against o.SHA256, and a wrong image is
// removed and an error returned.
func Fetch(ctx context.Context, o Options) (Stats, error) {
	start := time.Now()
	if o.N <= 0 {
		o.N = 16
	}
	if o.Log == nil {
		o.Log = logrus.New()
	}
	st, err := fetchChunks(ctx, o)
	if err == nil {
		err = checkImage(o.Output, o.SHA256)
	}
	if err != nil && ctx.Err() == nil && o.Whole != "" {
		o.Log.WithError(err).Warn("chunked fetch failed: fetching the whole image")
		st = Stats{Whole: true, Why: err.Error(), PeersDropped: st.PeersDropped, PeersSetAside: st.PeersSetAside}
		st.FromBootd, err = fetchWhole(ctx, o.Whole, o.Output)
		if err == nil {
			err = checkImage(o.Output, o.SHA256)
		}
	}
	if err != nil {
		if !o.SharedOutput {
			os.Truncate(o.Output, 0) // nothing unchecked stays, nor is served
		}
		os.Remove(o.haveFile())
		return st, err
	}
	fi, err := os.Stat(o.Output)
	if err != nil {
		return st, err
	}
	st.Size, st.Duration = fi.Size(), time.Since(start)
	return st, nil
}

func (o Options) haveFile() string {
	if o.HaveFile != "" {
		return o.HaveFile
	}
	return o.Output + HaveSuffix
}

func fetchChunks(ctx context.Context, o Options) (Stats, error) {
	var st Stats
	if o.Index == "" || o.Store == "" {
		return st, errors.New("no chunk index or store given")
	}
	idx, err := fetchIndex(ctx, o.Index, o.IndexSHA256)
	if err != nil {
		return st, err
	}
	// A file left by an earlier try is overwritten whole (truncated, not removed: a server may
	// hold it open).
	flags := os.O_RDWR | os.O_CREATE | os.O_TRUNC
	if o.SharedOutput {
		flags &^= os.O_TRUNC
	}
	out, err := os.OpenFile(o.Output, flags, 0o644)
	if err != nil {
		return st, err
	}
	defer out.Close()
	if err := out.Truncate(idx.Length()); err != nil {
		return st, err
	}
	have, err := newHaveMap(o.haveFile(), len(idx.Chunks))
	if err != nil {
		return st, err
	}
	defer have.close()
	if o.OnIndex != nil {
		o.OnIndex(idx)
	}
	a := newAssembler(ctx, idx, out, have, newSource(o.Store, false, httpClient(o.N, false)), o.Log)
	a.bootdSlots = bootdSlots
	if o.Self != "" {
		a.self = nodeHash(o.Self)
	}
	peerClient := httpClient(o.N, true)
	a.addPeers(o.Peers, map[string]bool{}, peerClient)
	for _, s := range o.Seeds {
		sd, err := openSeed(s)
		if err != nil {
			o.Log.WithError(err).WithField("seed", s.File).Warn("seed left out")
			continue
		}
		st.FromSeeds += a.fromSeeds([]seed{sd})
		sd.f.Close()
	}
	err = a.run(o.N, func(ctx context.Context) { a.pollHaves(ctx, o.PeerList, peerClient) })
	a.mu.Lock()
	st.PeersDropped = append(st.PeersDropped, a.dropped...)
	st.PeersSetAside = a.suspensions
	for _, p := range a.all {
		st.FromPeers += p.bytes.Load()
	}
	a.mu.Unlock()
	st.FromBootd = a.bootd.bytes.Load()
	if err != nil {
		have.clear()
		return st, fmt.Errorf("assemble from %s: %w", o.Index, err)
	}
	return st, nil
}

// bootdSlots bounds the chunks a node asks of bootd at once: enough to keep a link busy alone,
// few enough that in a storm bootd's link carries each chunk about once (the nodes pick from
// bootd only chunks no peer holds, each in its own random order).
const bootdSlots = 4

// fetchIndex downloads the index and checks it against the hash bootd's manifest gives.
func fetchIndex(ctx context.Context, url, want string) (desync.Index, error) {
	b, err := getBounded(ctx, url, maxIndex)
	if err != nil {
		return desync.Index{}, err
	}
	if got := sum(b); got != want {
		return desync.Index{}, fmt.Errorf("index %s: sha256 %s, want %s", url, got, want)
	}
	idx, err := desync.IndexFromReader(bytes.NewReader(b))
	if err != nil {
		return idx, fmt.Errorf("index %s: %w", url, err)
	}
	return idx, nil
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func getBounded(ctx context.Context, url string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient(1, false).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", url, limit)
	}
	return b, nil
}

// fetchWhole downloads url to path (the plain HTTP path) and returns the bytes it wrote.
func fetchWhole(ctx context.Context, url, path string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	client := httpClient(1, false)
	client.Timeout = 0 // a multi-GB image takes what it takes; the header wait stays bounded
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: status %s", url, resp.Status)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("%s: %w", url, err)
	}
	return n, nil
}

// checkImage compares the file's sha256 with want (rd.bootd.sha256).
func checkImage(path, want string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("image %s: sha256 %s, want %s", path, got, want)
	}
	return nil
}
