package embedded

import (
	"net"
	"strconv"
)

func netListen(port int) (net.Listener, error) {
	return net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
}
