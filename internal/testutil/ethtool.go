package testutil

import (
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Offload is a device offload `ethtool -K` would toggle. The machine has no
// ethtool(8) binary, so SetOffload speaks its ioctl itself (the legacy
// per-feature commands, which every kernel keeps).
type Offload int

const (
	// GRO merges received segments into super-packets before TC ingress.
	GRO Offload = iota
	// TSO lets the device (a veth: its peer) take TCP super-packets whole.
	TSO
	// GSO segments super-packets in software just before the driver.
	GSO
	// TxVLAN leaves a VLAN tag in the skb's metadata for the device to
	// insert; off, the stack inserts it into the frame before the driver.
	TxVLAN
)

func (o Offload) String() string {
	return [...]string{"gro", "tso", "gso", "txvlan"}[o]
}

// ETH_FLAG_TXVLAN in the flags of ETHTOOL_GFLAGS/SFLAGS.
const ethFlagTxVLAN = 1 << 7

// SetOffload turns an offload of ifname (in ns) on or off, and fails the
// test unless the device reports it changed.
func (ns *NS) SetOffload(t testing.TB, ifname string, o Offload, on bool) {
	t.Helper()
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		var set, get uint32
		var value uint32
		if on {
			value = 1
		}
		switch o {
		case GRO:
			get, set = unix.ETHTOOL_GGRO, unix.ETHTOOL_SGRO
		case TSO:
			get, set = unix.ETHTOOL_GTSO, unix.ETHTOOL_STSO
		case GSO:
			get, set = unix.ETHTOOL_GGSO, unix.ETHTOOL_SGSO
		case TxVLAN:
			// One command sets every flag: change only ours.
			flags, err := ethtoolValue(fd, ifname, unix.ETHTOOL_GFLAGS, 0)
			if err != nil {
				return err
			}
			flags &^= ethFlagTxVLAN
			if on {
				flags |= ethFlagTxVLAN
			}
			if _, err := ethtoolValue(fd, ifname, unix.ETHTOOL_SFLAGS, flags); err != nil {
				return err
			}
			got, err := ethtoolValue(fd, ifname, unix.ETHTOOL_GFLAGS, 0)
			if err != nil {
				return err
			}
			if (got&ethFlagTxVLAN != 0) != on {
				return fmt.Errorf("flags %#x after the change", got)
			}
			return nil
		}
		if _, err := ethtoolValue(fd, ifname, set, value); err != nil {
			return err
		}
		got, err := ethtoolValue(fd, ifname, get, 0)
		if err != nil {
			return err
		}
		if got != value {
			return fmt.Errorf("reads %d after the change", got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("in %s: ethtool -K %s %s %v: %v", ns.Name, ifname, o, on, err)
	}
}

// ethtoolValue issues one SIOCETHTOOL command that takes and returns a
// struct ethtool_value.
func ethtoolValue(fd int, ifname string, cmd, data uint32) (uint32, error) {
	// Heap-allocated, and reached through a pointer-typed field, so that
	// the kernel writes where Go still knows the value lives.
	v := &struct{ cmd, data uint32 }{cmd, data}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [16]byte // the rest of struct ifreq's union
	}
	copy(ifr.name[:], ifname)
	ifr.data = unsafe.Pointer(v)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return 0, fmt.Errorf("ethtool command %#x: %w", cmd, errno)
	}
	return v.data, nil
}
