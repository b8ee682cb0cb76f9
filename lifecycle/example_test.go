package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gracekit/gracekit/lifecycle"
)

func Example() {
	say := func(s string) func(context.Context) error {
		return func(context.Context) error { fmt.Println(s); return nil }
	}
	steps := []lifecycle.Step{
		{Name: "session", Stop: say("close session"), Always: true},
		{Name: "server", Start: say("listen and serve"), Stop: say("drain")},
		{Name: "registration", Start: say("register"), Stop: say("deregister"), Always: true},
		{Name: "flush", Stop: func(context.Context) error { return errors.New("gateway down") }},
	}
	e, err := lifecycle.New(steps, lifecycle.WithListener(func(ev lifecycle.Event) {
		if ev.Err != nil {
			fmt.Println("event:", ev.Err)
		}
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := e.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	err = e.Stop(context.Background())
	var serr *lifecycle.StepError
	fmt.Println("failed step:", errors.As(err, &serr), serr.Step)
	// Output:
	// listen and serve
	// register
	// event: lifecycle: stop step "flush": gateway down
	// deregister
	// drain
	// close session
	// failed step: true flush
}

func ExampleBudgetError() {
	_, err := lifecycle.New([]lifecycle.Step{
		{Name: "drain", Stop: func(context.Context) error { return nil }, StopTimeout: 20 * time.Second},
	}, lifecycle.StopBudget(15*time.Second))
	fmt.Println(err)
	// Output:
	// lifecycle: stop timeouts sum to 20s, over the stop budget of 15s (drain 20s)
}
