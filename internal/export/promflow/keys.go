package promflow

import (
	"fmt"
	"strconv"
	"strings"

	"loupe/internal/config/check"
	"loupe/internal/flow"
)

// Key is an optional aggregation key: a label added to the traffic counters
// next to the default iface, direction and proto. The set is fixed, and
// every key has a bounded number of values (ports 65 536, groups as many as
// configured), so that no configuration can turn the counters into per-flow
// series; addresses are deliberately not offered: use CIDR groups.
type Key uint8

// The aggregation keys. Their label name is Key.String.
const (
	// KeyEthType labels the EtherType: ipv4, ipv6, arp, or 0x%04x.
	KeyEthType Key = iota + 1
	// KeySrcPort and KeyDstPort label the transport ports of TCP, UDP,
	// UDP-Lite and SCTP, in decimal; "none" for every other protocol
	// (the flow key's ICMP type and code are not ports).
	KeySrcPort
	KeyDstPort
	// KeySrcGroup and KeyDstGroup label the name of the CIDR group (see
	// Group) the address falls into: the group of the longest matching
	// prefix, "other" when no prefix matches, "none" for non-IP flows.
	KeySrcGroup
	KeyDstGroup
	// KeyDSCP labels the DSCP of the flow's last packet (0-63); "none" for
	// non-IP flows.
	KeyDSCP
	// KeyVlanID labels the VLAN ID of the frame's outer tag (1-4095);
	// "none" for untagged frames.
	KeyVlanID
	// KeyNamespace and KeyWorkload label the Kubernetes namespace and
	// workload of the record's pod on this node (localPod): bounded by
	// the workloads the node runs, and capped with every other label set
	// by max_series. "none" for traffic of no pod, and without a cluster.
	// Pods themselves are not offered: they come and go with every
	// rollout, and would make a series per pod.
	KeyNamespace
	KeyWorkload

	keyCount = iota + 1 // one past the last key
)

var keyNames = [keyCount]string{
	KeyEthType:   "eth_type",
	KeySrcPort:   "src_port",
	KeyDstPort:   "dst_port",
	KeySrcGroup:  "src_group",
	KeyDstGroup:  "dst_group",
	KeyDSCP:      "dscp",
	KeyVlanID:    "vlan_id",
	KeyNamespace: "namespace",
	KeyWorkload:  "workload",
}

// String returns the key's name, which is also its label name.
func (k Key) String() string {
	if k > 0 && int(k) < len(keyNames) {
		return keyNames[k]
	}
	return fmt.Sprintf("key(%d)", uint8(k))
}

func (k Key) valid() bool { return k > 0 && int(k) < len(keyNames) }

// KeyNames lists the valid key names, in label order.
func KeyNames() []string {
	out := make([]string, 0, keyCount-1)
	for k := Key(1); k < keyCount; k++ {
		out = append(out, k.String())
	}
	return out
}

// ParseKeys converts key names (prometheus.keys in the configuration) into
// Keys. Names are case-sensitive, like label names; a name may appear once.
func ParseKeys(names []string) ([]Key, error) {
	out := make([]Key, 0, len(names))
	var seen [keyCount]bool
	for _, name := range names {
		k, ok := parseKey(strings.TrimSpace(name))
		if !ok {
			return nil, fmt.Errorf("keys: unknown key %s (valid: %s)", check.Quote(name), strings.Join(KeyNames(), ", "))
		}
		if seen[k] {
			return nil, fmt.Errorf("keys: %s listed twice", check.Quote(name))
		}
		seen[k] = true
		out = append(out, k)
	}
	return out, nil
}

func parseKey(name string) (Key, bool) {
	for k := Key(1); k < keyCount; k++ {
		if keyNames[k] == name {
			return k, true
		}
	}
	return 0, false
}

// Label values with a fixed meaning. "other" is also the value of every
// label but direction in the fold series, which is recognisable by
// proto="other": no flow has that protocol.
const (
	// Other is the label value of the fold series (and of an address that
	// no CIDR group covers).
	Other = "other"
	// None is the label value of a key that does not apply to the flow:
	// the protocol of a non-IP flow, the ports of ICMP.
	None = "none"
	// UnknownIface is the iface label of records whose interface name the
	// agent could not resolve.
	UnknownIface = "unknown"
)

// Sentinels in seriesKey for "does not apply", outside the values' ranges.
const (
	protoNone = 0x100   // non-IP flow
	portNone  = 0x10000 // protocol without ports
	dscpNone  = 0xff    // non-IP flow
	groupNone = 0       // no address (non-IP, or header cut short)
	groupOut  = 1       // an address no group covers: "other"
	groupBase = 2       // index of the first configured group
)

// protoLabel is flow's short protocol name, or the IANA number; "none"
// for non-IP flows.
func protoLabel(p uint16) string {
	if p == protoNone {
		return None
	}
	return flow.ProtoName(uint8(p))
}

func ethTypeLabel(t uint16) string {
	switch t {
	case flow.EtherTypeIPv4:
		return "ipv4"
	case flow.EtherTypeIPv6:
		return "ipv6"
	case flow.EtherTypeARP:
		return "arp"
	}
	return fmt.Sprintf("0x%04x", t)
}

func portLabel(p uint32) string {
	if p == portNone {
		return None
	}
	return strconv.Itoa(int(p))
}

func vlanLabel(v uint16) string {
	if v == 0 {
		return None
	}
	return strconv.Itoa(int(v))
}

func dscpLabel(d uint8) string {
	if d == dscpNone {
		return None
	}
	return strconv.Itoa(int(d))
}

// localPod is the pod end of r whose namespace and workload label it: the
// pod on the other end of r's interface (a pod's host-side veth: the
// traffic through it is that pod's, either way), else the source when it
// is a pod, else the destination; nil when r names no pod.
func localPod(r *flow.Record) *flow.K8sEnd {
	k := r.K8s
	if k == nil {
		return nil
	}
	for _, e := range [...]*flow.K8sEnd{&k.Src, &k.Dst} {
		if k.IfacePod != "" && e.Kind == flow.K8sPod && e.Pod == k.IfacePod && e.Namespace == k.IfaceNamespace {
			return e
		}
	}
	for _, e := range [...]*flow.K8sEnd{&k.Src, &k.Dst} {
		if e.Kind == flow.K8sPod {
			return e
		}
	}
	return nil
}
