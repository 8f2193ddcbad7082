// Command klauspost-ec measures klauspost/reedsolomon (Go, with its SIMD paths) on the
// shapes `weft bench ec` measures, so the two can be compared in one run on one machine:
//
//	go build -o klauspost-ec . && ./klauspost-ec --k 10 --r 4 --shard 16777216 --ops encode,rebuild
//
// --simd avx2 keeps it to its AVX2 kernels (no AVX-512, no GFNI), to compare with weft's
// WEFT_SIMD=avx2 on a CPU that has more.
// encode computes r parity shards from k data shards; rebuild recomputes one lost data
// shard (shard 0) from k survivors. Rates are data bytes per second (k × shard per op), the
// median of --trials timed trials, as weft's bench counts them. Every rebuild is checked
// byte for byte against the shard it replaced. Prints one JSON object per op.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/reedsolomon"
)

type row struct {
	Impl     string  `json:"impl"`
	Op       string  `json:"op"`
	K        int     `json:"k"`
	R        int     `json:"r"`
	Shard    int     `json:"shard_bytes"`
	GBps     float64 `json:"gb_per_s"`
	BestGBps float64 `json:"best_gb_per_s"`
	Trials   int     `json:"trials"`
	Simd     string  `json:"simd"`
}

func main() {
	k := flag.Int("k", 10, "data shards")
	r := flag.Int("r", 4, "parity shards")
	shard := flag.Int("shard", 16<<20, "bytes per shard")
	ops := flag.String("ops", "encode,rebuild", "operations, comma separated: encode, rebuild")
	trials := flag.Int("trials", 7, "timed trials per op (the median is reported)")
	minSeconds := flag.Float64("min-seconds", 0.2, "each trial repeats its op for at least this long")
	simd := flag.String("simd", "auto", "instruction sets: auto (klauspost's own choice, GFNI and AVX-512 where the CPU has them), avx2 (AVX2 split-nibble tables only: no AVX-512, no GFNI), ssse3, or none")
	flag.Parse()
	// One goroutine: weft bench ec's rows are per thread (--threads 1), and klauspost
	// otherwise splits large shards over every core.
	options := []reedsolomon.Option{reedsolomon.WithMaxGoroutines(1)}
	switch *simd {
	case "auto":
	case "avx2":
		options = append(options, reedsolomon.WithAVX512(false), reedsolomon.WithGFNI(false), reedsolomon.WithAVXGFNI(false))
	case "ssse3":
		options = append(options, reedsolomon.WithAVX512(false), reedsolomon.WithGFNI(false), reedsolomon.WithAVXGFNI(false), reedsolomon.WithAVX2(false))
	case "none":
		options = append(options, reedsolomon.WithAVX512(false), reedsolomon.WithGFNI(false), reedsolomon.WithAVXGFNI(false), reedsolomon.WithAVX2(false), reedsolomon.WithSSSE3(false), reedsolomon.WithSSE2(false))
	default:
		fmt.Fprintf(os.Stderr, "klauspost-ec: unknown --simd %q (auto, avx2, ssse3, none)\n", *simd)
		os.Exit(2)
	}
	enc, err := reedsolomon.New(*k, *r, options...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "klauspost-ec:", err)
		os.Exit(2)
	}
	rng := rand.New(rand.NewSource(1))
	shards := make([][]byte, *k+*r)
	for i := range shards {
		shards[i] = make([]byte, *shard)
		if i < *k {
			rng.Read(shards[i])
		}
	}
	if err := enc.Encode(shards); err != nil {
		fmt.Fprintln(os.Stderr, "klauspost-ec: encode:", err)
		os.Exit(1)
	}
	original := append([]byte(nil), shards[0]...)
	work := make([][]byte, len(shards))
	spare := make([]byte, *shard)
	for _, op := range strings.Split(*ops, ",") {
		var one func() error
		switch op {
		case "encode":
			one = func() error { return enc.Encode(shards) }
		case "rebuild":
			one = func() error {
				copy(work, shards)
				// Shard 0 lost: klauspost rebuilds into a buffer of capacity shard bytes.
				work[0] = spare[:0]
				for i := *k + 1; i < len(work); i++ {
					work[i] = nil // only k survivors are read: data 1..k-1 and parity 0
				}
				if err := enc.ReconstructData(work); err != nil {
					return err
				}
				if !bytes.Equal(work[0], original) {
					return fmt.Errorf("the rebuilt shard differs from the lost one")
				}
				return nil
			}
		default:
			fmt.Fprintf(os.Stderr, "klauspost-ec: unknown op %q (encode, rebuild)\n", op)
			os.Exit(2)
		}
		if err := one(); err != nil { // warm up, and check
			fmt.Fprintln(os.Stderr, "klauspost-ec:", op+":", err)
			os.Exit(1)
		}
		rates := make([]float64, 0, *trials)
		for t := 0; t < *trials; t++ {
			start := time.Now()
			n := 0
			for time.Since(start).Seconds() < *minSeconds {
				if err := one(); err != nil {
					fmt.Fprintln(os.Stderr, "klauspost-ec:", op+":", err)
					os.Exit(1)
				}
				n++
			}
			rates = append(rates, float64(n**k**shard)/time.Since(start).Seconds()/1e9)
		}
		sort.Float64s(rates)
		out, _ := json.Marshal(row{"klauspost", op, *k, *r, *shard, rates[len(rates)/2], rates[len(rates)-1], *trials, *simd})
		fmt.Println(string(out))
	}
}
