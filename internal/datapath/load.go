package datapath

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/cilium/ebpf"

	"loupe/internal/flow"
)

// Loading with a pin directory: adopt a pin set of this layout, or create
// and pin a new one; every other pin set is retired, to be drained through
// its own BTF (Leftovers) once the links run this agent's programs.

// load loads the programs against adopted or new maps.
func (d *Datapath) load(spec *ebpf.CollectionSpec) error {
	if d.opts.PinDir != "" {
		pd, err := openPinDir(d.opts.PinDir)
		switch {
		case errors.Is(err, errUnpinnable):
			d.log.Warn("running unpinned: counting stops while no agent runs, and a crash loses what the kernel counted since the last eviction",
				"pin_dir", d.opts.PinDir, "err", err)
		case err != nil:
			return err
		default:
			d.pins = pd
		}
	}
	if d.pins != nil {
		if err := d.adopt(spec); err != nil {
			return err
		}
		if d.adopted {
			return nil
		}
	}
	if err := d.assign(spec, nil); err != nil {
		if d.pins != nil && !d.adopted && len(d.retired) == 0 {
			d.pins.close(true) // created for nothing: removed if empty
			d.pins = nil
		}
		return loadErr(err)
	}
	st, err := newTableState()
	if err != nil {
		return err
	}
	if err := d.writeState(st); err != nil {
		return err
	}
	if err := d.writeSketchConf(); err != nil {
		return err
	}
	d.state = st
	d.cleared[st.Active^1] = true // flows_b: never written
	if d.pins == nil {
		return nil
	}
	d.setName = setPrefix + d.layout + "-" + strconv.FormatUint(st.PinSet, 16)
	if err := d.pins.pinSet(d.setName, d.pinnable()); err != nil {
		d.log.Warn("running unpinned: pinning the maps failed", "pin_dir", d.opts.PinDir, "err", err)
		d.pins.close(false)
		d.pins, d.retired = nil, nil
		return nil
	}
	d.log.Info("maps pinned", "pin_dir", d.opts.PinDir, "set", d.setName, "retired_sets", len(d.retired))
	return nil
}

func (d *Datapath) pinnable() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		loupeMapFlowsA: d.objs.FlowsA, loupeMapFlowsB: d.objs.FlowsB, loupeMapFlowState: d.objs.FlowState,
		loupeMapFlowSlotsA: d.objs.FlowSlotsA, loupeMapFlowSlotsB: d.objs.FlowSlotsB, loupeMapFlowSlotsFill: d.objs.FlowSlotsFill,
		loupeMapFlowIndexA: d.objs.FlowIndexA, loupeMapFlowIndexB: d.objs.FlowIndexB,
		loupeMapCounters: d.objs.Counters, loupeMapFlowEvents: d.objs.FlowEvents, loupeMapEventLayout: d.objs.EventLayout,
		loupeMapSketchCells: d.objs.SketchCells, loupeMapSketchFilter: d.objs.SketchFilter, loupeMapSketchCm: d.objs.SketchCm,
		loupeMapSketchSpill: d.objs.SketchSpill, loupeMapSketchConf: d.objs.SketchConf,
		loupeMapTunnelsA: d.objs.TunnelsA, loupeMapTunnelsB: d.objs.TunnelsB,
	}
}

// adopt loads the programs against the maps of a pin set of this layout,
// if there is one; every other set is retired.
func (d *Datapath) adopt(spec *ebpf.CollectionSpec) error {
	names, err := d.pins.sets()
	if err != nil {
		return err
	}
	for _, name := range names {
		if d.adopted || setLayout(name) != d.layout {
			d.retired = append(d.retired, name)
			continue
		}
		if err := d.adoptSet(spec, name); err != nil {
			d.log.Warn("pinned maps of this layout cannot be adopted; draining them as a retired set", "set", name, "err", err)
			d.retired = append(d.retired, name)
			continue
		}
		d.adopted, d.setName = true, name
	}
	if d.adopted {
		d.log.Info("adopted pinned maps: counting went on while no agent ran", "pin_dir", d.opts.PinDir, "set", d.setName,
			"active_table", d.state.Active, "epoch", d.state.epoch(d.state.Active), "retired_sets", len(d.retired))
	}
	return nil
}

func (d *Datapath) adoptSet(spec *ebpf.CollectionSpec, name string) error {
	maps, err := d.pins.loadSet(name)
	if err != nil {
		return err
	}
	if len(maps) != len(pinnedMaps) {
		closeMaps(maps)
		return fmt.Errorf("%d of its %d maps are pinned", len(maps), len(pinnedMaps))
	}
	// The programs are new (this agent's build); the maps are the pinned
	// ones, checked by cilium/ebpf against the spec (type, sizes, flags).
	err = d.assign(spec, &ebpf.CollectionOptions{MapReplacements: maps})
	closeMaps(maps) // the collection holds its own references
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return loadErr(err)
		}
		return fmt.Errorf("load against the pinned maps: %w", err)
	}
	st, err := d.readState()
	if err == nil && st.PinSet == 0 {
		err = errors.New("its table state has no set identity")
	}
	if err != nil {
		d.objs.Close()
		d.objs = loupeObjects{}
		return err
	}
	d.state = st
	// Neither table is known to be empty: the standby one may hold what
	// the previous agent swapped out but never cleared (Leftovers).
	return nil
}

// Leftovers returns what earlier agents left to drain, in the order to
// drain it: this set's standby table (adopted sets only), then both tables
// of every retired set, oldest epoch first. Call it once, after the links
// run this agent's programs: it first waits until no program of a previous
// agent can still write a retired set's tables.
func (d *Datapath) Leftovers() ([]flow.Drain, error) {
	if !d.adopted && len(d.retired) == 0 {
		return nil, nil
	}
	d.waitGrace()
	var out []flow.Drain
	if d.adopted {
		sb := d.state.Active ^ 1
		out = append(out, &tableDrain{d: d, idx: sb, mark: flow.Mark{Set: d.state.PinSet, Epoch: d.state.epoch(sb)},
			cutoff: d.state.installed(sb)})
	}
	var errs []error
	for _, name := range d.retired {
		r, err := openRetired(d.pins, name, d.ncpu, d.log)
		if err != nil {
			// Kept pinned: an operator (or a later build) may still
			// read it; `rm -r` the directory to give it up.
			d.log.Error("a retired pin set cannot be read; leaving it pinned", "set", name, "err", err)
			errs = append(errs, fmt.Errorf("retired pin set %s: %w", name, err))
			continue
		}
		out = append(out, r.drains()...)
	}
	d.retired = nil
	return out, errors.Join(errs...)
}

// Pinned reports whether the maps are pinned (and where): the attach
// manager pins its links under PinDir/LinksDir then.
func (d *Datapath) Pinned() bool { return d.pins != nil }

// Adopted reports whether the maps were pinned by an earlier agent.
func (d *Datapath) Adopted() bool { return d.adopted }

// Layout names the maps' layout (a pin set's directory starts with it).
func (d *Datapath) Layout() string { return d.layout }

// Unpin removes this set's pins, and the pin directory if nothing else is
// left in it: a clean stop, after the final eviction emptied the tables.
func (d *Datapath) Unpin() error {
	if d.pins == nil {
		return nil
	}
	err := d.pins.removeSet(d.setName)
	d.pins.close(err == nil)
	d.pins = nil
	return err
}

// assign loads the maps and the one build of the entry programs this
// datapath attaches (Ingress, Egress): flows alone has a build of its own,
// every other set of capabilities the build with all of them. The other
// build is not loaded: the verifier's work, about a tenth of a second per
// program, is a start's (and a restart's) delay.
func (d *Datapath) assign(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions) error {
	if d.flowsOnly() {
		var t struct {
			loupeMaps
			loupeVariables
			Ingress *ebpf.Program `ebpf:"loupe_flows_ingress"`
			Egress  *ebpf.Program `ebpf:"loupe_flows_egress"`
		}
		if err := spec.LoadAndAssign(&t, opts); err != nil {
			return err
		}
		d.objs.loupeMaps, d.objs.loupeVariables = t.loupeMaps, t.loupeVariables
		d.objs.LoupeFlowsIngress, d.objs.LoupeFlowsEgress = t.Ingress, t.Egress
		return nil
	}
	var t struct {
		loupeMaps
		loupeVariables
		Ingress *ebpf.Program `ebpf:"loupe_ingress"`
		Egress  *ebpf.Program `ebpf:"loupe_egress"`
	}
	if err := spec.LoadAndAssign(&t, opts); err != nil {
		return err
	}
	d.objs.loupeMaps, d.objs.loupeVariables = t.loupeMaps, t.loupeVariables
	d.objs.LoupeIngress, d.objs.LoupeEgress = t.Ingress, t.Egress
	return nil
}
