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
	"github.com/dlq/dlq/internal/cli"
)

func cmdTopology(args []string) int {
	cfg, log, _, code := cli.LoadConfig("topology", args, nil)
	if code >= 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	amqpTLS, err := cfg.AMQPClientTLS()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq topology: %v\n", err)
		return cli.ExitUsage
	}
	conn, err := broker.NewConn(broker.ConnConfig{URL: cfg.AMQPURL, Name: "dlq topology", Logger: log, TLS: amqpTLS})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq topology: %v\n", err)
		return cli.ExitUsage
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
		return cli.ExitOK
	}
	if err := broker.DeclareSources(ctx, conn, t, log); err != nil {
		fmt.Fprintf(os.Stderr, "dlq topology: %v\n", err)
		return topologyExit(err)
	}
	for _, s := range t.Sources {
		fmt.Printf("declared source queue %q\n", s.Name)
	}
	return cli.ExitOK
}

func topologyExit(err error) int {
	switch {
	case errors.Is(err, broker.ErrInvalidTopology), errors.Is(err, broker.ErrPrecondition):
		return cli.ExitUsage
	case errors.Is(err, context.DeadlineExceeded):
		return cli.ExitUnavailable
	}
	return cli.ExitFailure
}
