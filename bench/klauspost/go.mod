module weft.dev/bench/klauspost-ec

go 1.22

require github.com/klauspost/reedsolomon v1.12.4

require (
	github.com/klauspost/cpuid/v2 v2.2.8 // indirect
	golang.org/x/sys v0.24.0 // indirect
)
