package main

import (
	"strings"

	"github.com/gracekit/gracekit/sd"
)

// What a decoded node is, in ls's and watch's "kind".
const (
	nodeCurator = "curator" // Curator x-discovery JSON (gracekit's, Curator's, Spring's)
	nodeGoKit   = "gokit"   // written by go-kit's sd/zk Registrar: the data is the instance string
	nodeTwin    = "twin"    // a gracekit provider's go-kit twin (fxmodule.GoKitRegistration)
	nodePlain   = "plain"   // a data-less host:port node
)

// nodeKind says what a node read with codec is.
func nodeKind(codec sd.Codec, name string, inst sd.Instance) string {
	if _, ok := codec.(sd.PlainCodec); ok {
		return nodePlain
	}
	_, gokit := inst.Metadata[sd.MetadataGoKitInstance]
	switch {
	case inst.Metadata[sd.MetadataTwinOf] != "" || gokit && strings.HasPrefix(name, sd.GoKitTwinPrefix):
		return nodeTwin
	case gokit:
		return nodeGoKit
	}
	return nodeCurator
}

// twinOf is the id of the Curator node a twin stands for.
func twinOf(name string) string { return strings.TrimPrefix(name, sd.GoKitTwinPrefix) }

// serviceLayout names the layout of a service's readable nodes: curator,
// gokit (go-kit nodes and twins only), mixed (both), plain, or "" when
// none could be read.
func serviceLayout(nodes []nodeScan, codec sd.Codec) string {
	var curator, gokit, plain bool
	for _, n := range nodes {
		if n.readErr != nil || n.decErr != nil {
			continue
		}
		switch nodeKind(codec, n.name, n.inst) {
		case nodeCurator:
			curator = true
		case nodePlain:
			plain = true
		default:
			gokit = true
		}
	}
	switch {
	case plain:
		return layoutPlain
	case curator && gokit:
		return layoutMixed
	case gokit:
		return layoutGoKit
	case curator:
		return layoutCurator
	}
	return ""
}
