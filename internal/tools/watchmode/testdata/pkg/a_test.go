package pkg_test

import "testing"

var recursive = sd.WithWatchMode(sd.WatchRecursive)

func newInstancer(t *testing.T, cl *sd.Client, service string, opts ...sd.InstancerOption) *sd.Instancer {
	in, _ := sd.NewInstancer(cl, service, opts...)
	return in
}

func collect(in *sd.Instancer) {}

func TestDefault(t *testing.T)        { newInstancer(t, nil, "a") }
func TestPinnedByVar(t *testing.T)    { newInstancer(t, nil, "a", recursive) }
func TestPinnedInline(t *testing.T)   { sd.NewCatalog(nil, sd.WithWatchMode(mode)) }
func TestCatalogDefault(t *testing.T) { sd.NewCatalog(nil) }
func TestNoWatcher(t *testing.T)      { collect(nil) }
func TestThroughAValue(t *testing.T)  { run(t, TestDefault) }
func TestInAClosure(t *testing.T) {
	t.Run("sub", func(t *testing.T) { sd.NewInstancerContext(nil, nil, "a") })
}
func TestMixed(t *testing.T) {
	newInstancer(t, nil, "a", recursive)
	newInstancer(t, nil, "b")
}
func Example()               { sd.NewInstancer(nil, "a") }
func TestMain(m *testing.M)  { newInstancer(nil, nil, "a") }
func Testlower(t *testing.T) { newInstancer(t, nil, "a") }

func watch(t *testing.T, opts ...sd.InstancerOption) { sd.NewCatalog(nil, opts...) }

func TestPinnedThroughAHelper(t *testing.T)  { watch(t, recursive) }
func TestDefaultThroughAHelper(t *testing.T) { watch(t) }
