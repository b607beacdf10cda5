#!/usr/bin/env bash
# Builds an OpenTelemetry Collector for the stream's tests with the
# collector's own builder: an OTLP receiver (HTTP) and a file exporter,
# nothing else. It builds into .cache/otelcol/ once and prints the binary's
# path; a binary already there of the pinned version is reused.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$self")/.."
version=0.165.0
providers=1.71.0 # the confmap providers released with $version
out=$PWD/.cache/otelcol
bin=$out/dist/otelcol-guard-test
stamp=$out/dist/built
# The stamp names what was built: the version and this script's manifest.
want="$version $(sha256sum "$self" | cut -c1-16)"
if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$out"
GOBIN=$out/bin go install "go.opentelemetry.io/collector/cmd/builder@v$version" >&2
cat >"$out/builder.yaml" <<YAML
dist:
  module: github.com/guard-mcp/guard/otelcol-guard-test
  name: otelcol-guard-test
  description: OpenTelemetry Collector for guard's stream tests (OTLP receiver, file exporter)
  version: $version
  output_path: $out/dist
receivers:
  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver v$version
exporters:
  - gomod: github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter v$version
providers:
  - gomod: go.opentelemetry.io/collector/confmap/provider/envprovider v$providers
  - gomod: go.opentelemetry.io/collector/confmap/provider/fileprovider v$providers
YAML
rm -f "$stamp"
# The builder's own `go mod tidy` stops at a module the file exporter's
# tests import that the Go module proxy does not serve
# (otlpencodingextension): the sources are generated, tidied past it (the
# binary does not need it), then compiled by the builder.
# The builder writes go.mod only when it gets the modules, and then stops
# at that module: its failure there is expected, a missing go.mod is not.
rm -rf "$out/dist"
"$out/bin/builder" --config="$out/builder.yaml" --skip-compilation >&2 || true
if ! [ -f "$out/dist/go.mod" ]; then
  echo "otelcol: the builder did not generate $out/dist/go.mod" >&2
  exit 1
fi
(cd "$out/dist" && go mod tidy -e -compat=1.25 2>&1 | grep -v '^go: downloading' >&2 || true)
"$out/bin/builder" --config="$out/builder.yaml" --skip-generate --skip-get-modules >&2
echo "$want" >"$stamp"
echo "$bin"
