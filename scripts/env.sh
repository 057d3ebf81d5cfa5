# Sourced by the scripts: puts the Go that deps.sh installs on PATH.
case ":$PATH:" in
*:/usr/local/go/bin:*) ;;
*) export PATH=/usr/local/go/bin:$PATH ;;
esac
export PATH=$PATH:$(go env GOPATH 2>/dev/null || echo /root/go)/bin
