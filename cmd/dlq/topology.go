package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlq/dlq/broker"
)

func cmdTopology(args []string) int {
	cfg, log, _, code := loadConfig("topology", args, nil)
	if code >= 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	conn, err := broker.NewConn(broker.ConnConfig{URL: cfg.AMQPURL, Name: "dlq topology", Logger: log})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq topology: %v\n", err)
		return exitUsage
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t := cfg.BrokerTopology()
	if err := broker.DeclareOwn(ctx, conn, t); err != nil {
		fmt.Fprintf(os.Stderr, "dlq topology: %v\n", err)
		return topologyExit(err)
	}
	fmt.Printf("declared exchange %q (topic), queues %v bound with #, control queue %q\n", t.Exchange, t.Queues, t.ControlQueue)
	if len(t.Sources) == 0 {
		return exitOK
	}
	if err := broker.DeclareSources(ctx, conn, t, log); err != nil {
		fmt.Fprintf(os.Stderr, "dlq topology: %v\n", err)
		return topologyExit(err)
	}
	for _, s := range t.Sources {
		fmt.Printf("declared source queue %q\n", s.Name)
	}
	return exitOK
}

func topologyExit(err error) int {
	switch {
	case errors.Is(err, broker.ErrInvalidTopology), errors.Is(err, broker.ErrPrecondition):
		return exitUsage
	case errors.Is(err, context.DeadlineExceeded):
		return exitUnavailable
	}
	return exitFailure
}
