module github.com/guard-mcp/guard

go 1.26.8

require github.com/gowebpki/jcs v1.0.2

require go.yaml.in/yaml/v3 v3.0.6 // indirect
