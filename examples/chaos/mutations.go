package main

// The planted bugs' source edits. The library carries none of them: the
// mutation mode writes each mutant's edited files to a directory of its
// own and builds with go build -overlay (plant, in mutants.go), so only
// the binaries of that mutant have the bug. Every edit's new text says
// "planted bug", and TestLibraryCarriesNoPlantedBug checks that no such
// text is in the library's source.

// plantedMarker is what every edit's new text says, in lower case.
const plantedMarker = "planted bug"

// edit is an exact-text replacement in one file of the library's module:
// old, found exactly once in file, becomes new. An edit whose old is ""
// adds file, which must not exist, with new as its text.
type edit struct {
	file     string // relative to the library's module root, slash-separated
	old, new string
}

// plantedEdits are the edits of each mutant, by name.
var plantedEdits = map[string][]edit{
	"skipflush": {{
		file: "shutdown/sequence.go",
		old:  "func (s *Sequence) flush(ctx context.Context) error {\n",
		new: "func (s *Sequence) flush(ctx context.Context) error {\n" +
			"\treturn nil // planted bug: the stop skips the gateway flush\n",
	}},
	"dropdelete": {{
		file: "sd/instancer_recursive.go",
		old: "\t\tif op.Del {\n" +
			"\t\t\tin.forgetLocked(n, in.entries[n])\n",
		new: "\t\tif op.Del {\n" +
			"\t\t\tif plantedDropDeletion() {\n" +
			"\t\t\t\tcontinue // planted bug: one deletion in five is dropped\n" +
			"\t\t\t}\n" +
			"\t\t\tin.forgetLocked(n, in.entries[n])\n",
	}, {
		file: "sd/planted_dropdelete.go",
		new: "package sd\n\n" +
			"import \"sync/atomic\"\n\n" +
			"var plantedDeletions atomic.Uint64\n\n" +
			"// plantedDropDeletion is true for one deletion in five (planted bug).\n" +
			"func plantedDropDeletion() bool { return plantedDeletions.Add(1)%5 == 0 }\n",
	}},
	"norecreate": {{
		file: "sd/registrar.go",
		old:  "\tinst := r.inst.clone() // SetStatus may write Metadata meanwhile\n",
		new: "\tinst := r.inst.clone() // SetStatus may write Metadata meanwhile\n" +
			"\tif r.lastCzxid != 0 {\n" +
			"\t\tr.mu.Unlock()\n" +
			"\t\treturn nil // planted bug: the node is never re-created after an expiry\n" +
			"\t}\n",
	}},
	// Both of the session's defences go, and the Catalog's fence too:
	// either defence alone hides the other's absence.
	"nozxid": {{
		file: "internal/zkwire/zxid.go",
		old:  "func zxidToSend(seen int64) int64 { return seen }\n",
		new:  "func zxidToSend(seen int64) int64 { return 0 } // planted bug: every handshake sends lastZxidSeen 0\n",
	}, {
		file: "sd/instancer_recursive.go",
		old:  "func (in *Instancer) behind(w zkconn.Work, r zkwire.Reply) error {\n",
		new: "func (in *Instancer) behind(w zkconn.Work, r zkwire.Reply) error {\n" +
			"\treturn nil // planted bug: a re-read from behind is published\n",
	}, {
		file: "sd/catalog.go",
		old:  "zxid > 0 && zxid < readZxid && readOrder == w.Lineage {\n",
		new:  "zxid > 0 && zxid < readZxid && readOrder == w.Lineage && false { // planted bug: a listing from behind is published\n",
	}},
	"ignoredrain": {{
		file: "sd/registrar.go",
		old:  "\t\t\tby := cur.Metadata[MetadataDrainedBy]\n",
		new: "\t\t\tby := cur.Metadata[MetadataDrainedBy]\n" +
			"\t\t\tby = \"\" // planted bug: the Registrar never sees an operator's drain\n",
	}},
	"noreread": {{
		file: "sd/instancer_recursive.go",
		old: "\tif !w.Full {\n" +
			"\t\treturn in.applyOps(w, due)\n" +
			"\t}\n",
		new: "\tif !w.Full {\n" +
			"\t\treturn in.applyOps(w, due)\n" +
			"\t}\n" +
			"\t// planted bug: the stored set is published as ZooKeeper's own before the re-read answered\n" +
			"\tin.mu.Lock()\n" +
			"\tif in.firstDone {\n" +
			"\t\tin.pubErr = nil\n" +
			"\t\tin.publishLocked()\n" +
			"\t}\n" +
			"\tin.mu.Unlock()\n",
	}},
	"nominup": {{
		file: "cmd/gracekit/drain.go",
		old:  "\t\t\tfailed, err := commit(reg, guard, op)\n",
		new:  "\t\t\tfailed, err := commit(reg, nil, op) // planted bug: the -min-up guard counts, then writes without checking what it counted\n",
	}},
	"sickunreported": {{
		file: "provider/health.go",
		old:  "\tif reg := p.Registrar(); reg != nil {\n",
		new:  "\tif reg := p.Registrar(); reg != nil && healthy { // planted bug: a failed health check never reaches the registry\n",
	}},
	"readyrace": {{
		file: "provider/drain.go",
		old:  "\tv.sick = sick\n\tp.applyReadinessLocked()\n",
		new: "\tv.sick = sick\n\tp.applyReadinessLocked()\n" +
			"\tif !sick {\n" +
			"\t\tp.ready.SetHealthy(true) // planted bug: a health recovery marks a drained instance ready\n" +
			"\t}\n",
	}},
	"rampreset": {{
		file: "endpoint/endpointer.go",
		old: "\t\t\tif joined && e.opts.slowStart != nil && e.reregistered(in) {\n" +
			"\t\t\t\te.weigh(in, true) // a new registration behind the string: its own ramp\n" +
			"\t\t\t}\n",
		new: "\t\t\te.weigh(in, false) // planted bug: a rebuild weighs every instance it keeps as warm, ending its ramp\n",
	}},
	"neverlost": {{
		file: "sd/lost.go",
		old: "func (c *Client) behind(ctx context.Context, addr string, zxid int64) (at int64, behind bool) {\n" +
			"\tif zxid <= 0 {\n",
		new: "func (c *Client) behind(ctx context.Context, addr string, zxid int64) (at int64, behind bool) {\n" +
			"\tif zxid <= 0 || true { // planted bug: no server is ever behind, so a refused session is never given up\n",
	}},
	"parentnolimit": {{
		file: "sd/registrar.go",
		old:  "\treturn r.c.ensurePath(ctx, path.Dir(r.path), r.opts.parents == ParentsContainer, r.call)\n",
		new: "\t// planted bug: the parents' exists and creates go without the reply limit and the caller's ctx\n" +
			"\treturn r.c.ensurePath(ctx, path.Dir(r.path), r.opts.parents == ParentsContainer, func(_ context.Context, fn func() error) error { return fn() })\n",
	}},
	"forgetdrain": {{
		file: "sd/registrar.go",
		old: "\tif r.drainedBy != \"\" {\n" +
			"\t\t// Drained: the operator's word outlives the node it was written in.\n",
		new: "\tif r.drainedBy != \"\" && false { // planted bug: a node re-created after an expiry forgets the operator's drain\n" +
			"\t\t// Drained: the operator's word outlives the node it was written in.\n",
	}},
}
