package sd

// SetDefaultWatchMode sets the mode of Instancers made without
// WithWatchMode, so that the sd tests run in either mode (see TestMain).
func SetDefaultWatchMode(m WatchMode) { defaultWatchMode = m }
