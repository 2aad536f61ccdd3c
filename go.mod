module github.com/llm-failover/failover

go 1.26.0

require (
	github.com/VictoriaMetrics/metrics v1.45.0
	github.com/caarlos0/env/v11 v11.4.2
	github.com/lmittmann/tint v1.2.1
	github.com/valyala/fasthttp v1.78.0
	github.com/valyala/fastjson v1.6.10
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/molecule-man/go-brrr v1.3.1 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fastrand v1.1.0 // indirect
	github.com/valyala/histogram v1.2.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
