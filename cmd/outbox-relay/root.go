// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-sql-driver/mysql" // also the "mysql" database/sql driver
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/logging"
	"github.com/outbox-relay/outbox-relay/internal/redisconn"
)

// Exit codes, documented in docs/cli.md.
const (
	exitOK      = 0 // success
	exitRuntime = 1 // the command ran and failed (database down, migration failed, ...)
	exitUsage   = 2 // bad flags, arguments or configuration: nothing was done
	exitRefused = 3 // a confirmation was refused or could not be asked: nothing was changed
)

// exitError carries an exit code up to execute.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func refusedError(format string, args ...any) error {
	return &exitError{code: exitRefused, err: fmt.Errorf(format, args...)}
}

// noConfig marks commands that must work without (or with a broken) configuration.
const noConfig = "no-config"

// app is the CLI's wiring: its streams and, once loaded, the configuration and logger.
// One app serves one execution; tests build their own.
type app struct {
	in          io.Reader
	out, errOut io.Writer
	// interactive reports whether in is a terminal a person can answer on.
	interactive bool

	cfg config.Config
	log zerolog.Logger
	// ready is set once flags, arguments and configuration are all valid: an error after
	// that is a runtime error, before it a usage error.
	ready bool
	// process is set when this app is the process's command line (execute, called by
	// main): it then owns the process-wide loggers of the drivers.
	process bool
}

// execute runs the command line args and returns the process exit code.
func execute(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	a := &app{in: in, out: out, errOut: errOut, process: true}
	if f, ok := in.(*os.File); ok {
		a.interactive = logging.IsTerminal(f)
	}
	defer quietDrivers()
	return a.execute(ctx, args)
}

func (a *app) execute(ctx context.Context, args []string) int {
	root := a.newRootCmd()
	root.SetArgs(args)
	root.SetIn(a.in)
	root.SetOut(a.out)
	root.SetErr(a.errOut)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	code := exitRuntime
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		code = ee.code
	case !a.ready:
		code = exitUsage
	}
	err = withHint(err)
	if a.ready && (cmd == root || cmd.Name() == "run") {
		// The relay's stderr goes to a log shipper: its last words are a JSON line too.
		a.log.Error().Err(err).Int("exit_code", code).Msg("outbox-relay stopped")
		return code
	}
	fmt.Fprintf(a.errOut, "outbox-relay: %v\n", err)
	if code == exitUsage {
		fmt.Fprintln(a.errOut, "Run 'outbox-relay --help' for usage.")
	}
	return code
}

// withHint adds what to do to an error whose cause the server names but not its remedy: a
// missing table (MySQL error 1146) is one `outbox-relay migrate` creates.
func withHint(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == mysqlNoSuchTable {
		return fmt.Errorf("%w\nthe outbox table does not exist in this database: run `outbox-relay migrate` to create it (or check mysql.table)", err)
	}
	return err
}

// mysqlNoSuchTable is the server's ER_NO_SUCH_TABLE.
const mysqlNoSuchTable = 1146

func (a *app) newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "outbox-relay",
		Short: "Transactional-outbox relay from MySQL to RocketMQ",
		Long: `outbox-relay delivers the rows that services commit to an outbox table (local_message)
to Apache RocketMQ, at least once, retrying with exponential backoff and parking what
cannot be delivered as dead for an operator.

Without a command it runs the relay. Configuration comes from a YAML file (--config or
OUTBOX_CONFIG), OUTBOX_* environment variables and flags, each overriding the one before.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		Args:              cobra.NoArgs,
		PersistentPreRunE: a.loadConfig,
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	// --version prints what `version` prints; cobra answers it before loading the config.
	root.Version = version
	root.SetVersionTemplate(versionText())
	fs := root.PersistentFlags()
	fs.String("config", "", "YAML configuration file (env OUTBOX_CONFIG)")
	config.AddFlags(fs)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: err}
	})

	run := a.newRunCmd()
	root.RunE = run.RunE
	root.AddCommand(run, a.newMigrateCmd(), a.newVersionCmd(), a.newConfigCmd(), a.newStatusCmd(),
		a.newDeadCmd(), a.newRequeueCmd(), a.newPurgeCmd(), a.newHealthcheckCmd(), a.newBenchCmd(), a.newCheckCmd(),
		a.newReplayCmd())
	root.AddCommand(a.newAuditCmd())
	return root
}

// loadConfig loads and validates the configuration and sets up logging before any command
// that needs them.
func (a *app) loadConfig(cmd *cobra.Command, _ []string) error {
	for c := cmd; c != nil; c = c.Parent() {
		if c.Annotations[noConfig] != "" || c.Name() == "completion" {
			a.ready = true
			return nil
		}
	}
	cfg, err := configFrom(cmd.Flags())
	if err != nil {
		return err
	}
	log, err := logging.New(a.errOut, cfg.Log.Level, cfg.Log.Format)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	a.cfg, a.log, a.ready = cfg, log, true
	if a.process {
		useDriverLoggers(log)
	}
	return nil
}

// configFrom loads the configuration the way a command given flags does: the file named by
// --config (or OUTBOX_CONFIG), then the environment, then the flags.
func configFrom(flags *pflag.FlagSet) (config.Config, error) {
	return configFromWith(flags, config.NewViper())
}

// configFromWith is configFrom reading into v, which may carry extra defaults.
func configFromWith(flags *pflag.FlagSet, v *viper.Viper) (config.Config, error) {
	file, _ := flags.GetString("config")
	if file == "" {
		file = os.Getenv(config.EnvConfigFile)
	}
	if err := config.BindFlags(v, flags); err != nil {
		return config.Config{}, err
	}
	cfg, err := config.Load(v, file)
	if err != nil {
		return config.Config{}, &exitError{code: exitUsage, err: fmt.Errorf("invalid configuration:\n%w", err)}
	}
	if flags.Changed("table") {
		cfg.MySQL.Tables = nil // an explicit --table wins over mysql.tables from file or env
	}
	return cfg, nil
}

// openRedis returns the configured Redis clients (the lock's Redlock masters included);
// they connect on first use.
func (a *app) openRedis() *redisconn.Conn {
	return redisconn.Open(a.cfg, redisconn.Options{DialTimeout: 3 * time.Second, MaxRetries: 1})
}
