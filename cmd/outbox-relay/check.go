// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	rmqerrors "github.com/apache/rocketmq-client-go/v2/errors"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

func (a *app) newCheckCmd() *cobra.Command {
	var topics []string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check that the routes' topics exist in RocketMQ",
		Long: `Ask RocketMQ's name servers (rocketmq.nameservers, with the configured namespace,
credentials and TLS) for the route of every topic the routes name literally (a pattern such
as "order-*" cannot be checked) and of every --topic, and list them: "ok" with the number of
writable queues, or "missing" with the mqadmin command that creates it. With
autoCreateTopicEnable=false, RocketMQ's production setting, a missing topic makes every row
of it fail. An ordered route's topic is created as a 5.x FIFO topic (message.type=FIFO): a
5.x proxy refuses a message whose type does not match its topic's. Then says whether the
broker audit can ask the brokers of the routes' existing topics (every broker of their routes
must serve its pulls: a user allowed only to publish cannot), in the words the relay logs at
start and the audit command prints. Exits 1 when a topic is missing, a name server does not
answer or the audit is enabled and cannot ask the brokers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The client logs every missing route as an error: the table says it better.
			if a.log.GetLevel() <= zerolog.DebugLevel {
				useClientLogger(a.log)
			} else {
				useClientLogger(zerolog.Nop())
			}
			checks := topicsToCheck(a.cfg.Routes, topics)
			if len(checks) == 0 {
				fmt.Fprintln(a.out, "no topic to check: the routes name none literally; name topics with --topic")
				ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
				defer cancel()
				return checkAudit(ctx, a.out, a.cfg)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			link, err := openRocketMQ(ctx, a.cfg.RocketMQ, a.log)
			if err != nil {
				return err
			}
			defer link.close()
			adm, err := newAdmin(a.cfg.RocketMQ, link)
			if err != nil {
				return err
			}
			defer adm.Close()
			results := checkTopics(ctx, adm, checks)
			if err := printTopicChecks(a.out, a.cfg.RocketMQ, results, clusterOf(adm, a.cfg.RocketMQ.Namespace, results)); err != nil {
				return err
			}
			fmt.Fprintln(a.out)
			auditErr := checkAudit(ctx, a.out, a.cfg)
			for _, r := range results {
				if r.err != nil || r.missing {
					return fmt.Errorf("check: %d of %d topics missing or not checked", countBad(results), len(results))
				}
			}
			return auditErr
		},
	}
	cmd.Flags().StringSliceVar(&topics, "topic", nil, "another topic to check (repeatable), e.g. one that no route names")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the name servers")
	return cmd
}

// topicCheck is one topic to look up, and whether an ordered route sends to it.
type topicCheck struct {
	topic   string
	ordered bool
}

// topicResult is what the name servers said of one topic.
type topicResult struct {
	topicCheck
	queues  int
	missing bool
	err     error
}

// topicsToCheck lists the routes' literal topics and extra, once each, in that order.
func topicsToCheck(routes []config.Route, extra []string) []topicCheck {
	var out []topicCheck
	add := func(topic string, ordered bool) {
		for i := range out {
			if out[i].topic == topic {
				out[i].ordered = out[i].ordered || ordered
				return
			}
		}
		out = append(out, topicCheck{topic, ordered})
	}
	for _, r := range routes {
		if !strings.ContainsAny(r.Topic, `*?[\`) {
			add(r.Topic, r.Ordered)
		}
	}
	for _, t := range extra {
		if t = strings.TrimSpace(t); t != "" {
			add(t, false)
		}
	}
	return out
}

// routeReader is the part of rocketmq-client-go's admin API check uses.
type routeReader interface {
	FetchPublishMessageQueues(ctx context.Context, topic string) ([]*primitive.MessageQueue, error)
	FetchClusterList(topic string) ([]string, error)
}

// newAdmin returns the admin client of mq, reaching it through link. It holds the client's
// process-wide TLS switch until closed.
func newAdmin(mq config.RocketMQ, link rocketMQLink) (admin.Admin, error) {
	opts := []admin.AdminOption{admin.WithResolver(primitive.NewPassthroughResolver(link.nameServers))}
	if mq.AccessKey != "" {
		opts = append(opts, admin.WithCredentials(primitive.Credentials{AccessKey: mq.AccessKey, SecretKey: mq.SecretKey}))
	}
	if mq.Namespace != "" {
		opts = append(opts, admin.WithNamespace(mq.Namespace))
	}
	claim, err := rocketmq.ClaimClientTLS(link.clientTLS)
	if err != nil {
		return nil, fmt.Errorf("check: RocketMQ admin client: %w", err)
	}
	var adm admin.Admin
	err = claim.Build(func(writeTLS bool) (err error) {
		if writeTLS {
			opts = append(opts, admin.WithTls(link.clientTLS))
		}
		adm, err = admin.NewAdmin(opts...)
		return err
	})
	if err != nil {
		claim.Release()
		return nil, fmt.Errorf("check: RocketMQ admin client: %w", err)
	}
	return claimedAdmin{Admin: adm, claim: claim}, nil
}

// claimedAdmin is an admin client that gives back its TLS claim when closed.
type claimedAdmin struct {
	admin.Admin
	claim *rocketmq.TLSClaim
}

// Close closes the admin client, then releases its claim on the client's TLS switch.
func (a claimedAdmin) Close() error {
	defer a.claim.Release()
	return a.Admin.Close()
}

// checkTopics asks for each topic's route (the admin client adds the namespace).
func checkTopics(ctx context.Context, adm routeReader, checks []topicCheck) []topicResult {
	out := make([]topicResult, len(checks))
	for i, c := range checks {
		out[i].topicCheck = c
		if err := ctx.Err(); err != nil {
			out[i].err = err
			continue
		}
		mqs, err := adm.FetchPublishMessageQueues(ctx, c.topic)
		switch {
		case errors.Is(err, rmqerrors.ErrTopicNotExist):
			out[i].missing = true
		case err != nil:
			out[i].err = err
		default:
			out[i].queues = len(mqs)
			out[i].missing = len(mqs) == 0
		}
	}
	return out
}

// clusterOf names the cluster an existing topic of results lives in, for the mqadmin
// commands ("" when none is known).
func clusterOf(adm routeReader, namespace string, results []topicResult) string {
	for _, r := range results {
		if r.err == nil && !r.missing {
			if cs, err := adm.FetchClusterList(qualifiedTopic(namespace, r.topic)); err == nil && len(cs) > 0 {
				slices.Sort(cs)
				return cs[0]
			}
		}
	}
	return ""
}

func printTopicChecks(w io.Writer, mq config.RocketMQ, results []topicResult, cluster string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tSTATUS\tDETAIL")
	var missing []topicResult
	for _, r := range results {
		name := qualifiedTopic(mq.Namespace, r.topic)
		switch {
		case r.err != nil:
			fmt.Fprintf(tw, "%s\tnot checked\t%v\n", name, r.err)
		case r.missing:
			fmt.Fprintf(tw, "%s\tmissing\tno route: every row of it fails until it is created\n", name)
			missing = append(missing, r)
		default:
			fmt.Fprintf(tw, "%s\tok\t%d writable queues\n", name, r.queues)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	if cluster == "" {
		cluster = "<brokerClusterName>"
	}
	fmt.Fprintf(w, "\nCreate the missing topics with mqadmin against the brokers' name server (not a proxy);\n8 queues is an example; leave out -a +message.type=... on RocketMQ 4.x:\n")
	for _, r := range missing {
		name := qualifiedTopic(mq.Namespace, r.topic)
		kind := "NORMAL"
		if r.ordered {
			kind = "FIFO"
		}
		fmt.Fprintf(w, "  mqadmin updateTopic -n %s -c %s -t %s -r 8 -w 8 -a +message.type=%s\n",
			strings.Join(mq.NameServers, ";"), cluster, name, kind)
	}
	return nil
}

// auditOff is what check says when the audit is switched off.
const auditOff = "broker audit: OFF (audit.enabled=false): messages the broker loses after acknowledging them are not found"

// checkAudit prints whether the broker audit can run: off by configuration, on (every
// broker of the routes' topics serves its pulls), or off because the brokers cannot be asked,
// in brokeraudit.CanAsk's words (the audit service logs and `outbox-relay audit` prints the
// same), which is an error: check exits 1.
func checkAudit(ctx context.Context, w io.Writer, cfg config.Config) error {
	if !cfg.Audit.Enabled {
		fmt.Fprintln(w, auditOff)
		return nil
	}
	if err := brokeraudit.CanAsk(ctx, brokeraudit.ForConfig(cfg)); err != nil {
		fmt.Fprintf(w, "broker audit: OFF: %v\n", err)
		return errors.New("check: the broker audit cannot ask the brokers")
	}
	fmt.Fprintln(w, "broker audit: ok, every broker of the routes' topics serves the audit's pulls (tables also need their stored-position journal: outbox-relay migrate --check)")
	return nil
}

// qualifiedTopic is topic as RocketMQ names it in namespace.
func qualifiedTopic(namespace, topic string) string {
	if namespace == "" {
		return topic
	}
	return namespace + "%" + topic
}

func countBad(results []topicResult) int {
	n := 0
	for _, r := range results {
		if r.err != nil || r.missing {
			n++
		}
	}
	return n
}
