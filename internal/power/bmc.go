package power

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
)

// bmclib's provider names for the two protocols bootd offers.
var providers = map[string]string{MethodIPMI: "ipmitool", MethodRedfish: "gofish"}

// openBMC connects to a BMC through bmclib, with only the provider of b's protocol: bmclib
// would otherwise try every vendor's API in turn. Redfish logs in to a session here; IPMI logs
// in with each request.
func openBMC(ctx context.Context, b BMC) (Controller, error) {
	provider, ok := providers[b.Protocol]
	if !ok {
		return nil, fmt.Errorf("unknown BMC protocol %q", b.Protocol)
	}
	if b.Protocol == MethodIPMI {
		if _, err := exec.LookPath("ipmitool"); err != nil {
			return nil, errors.New("ipmitool is not installed on this appliance (Debian and Rocky: package ipmitool)")
		}
	}
	host, port, err := net.SplitHostPort(b.Address)
	if err != nil {
		host, port = b.Address, ""
	}
	var opts []bmclib.Option
	if port != "" {
		opts = append(opts, bmclib.WithIpmitoolPort(port), bmclib.WithRedfishPort(port))
	}
	c := bmclib.NewClient(host, b.User, string(b.Password), opts...)
	c.Registry.Drivers = c.Registry.For(provider)
	if b.Protocol == MethodIPMI {
		// ipmitool logs in afresh at every run: bmclib's Open would be one more `chassis power
		// status`, which the caller asks next anyway (and the poll once a minute per BMC).
		return &bmclibController{c: c, loggingIn: true}, nil
	}
	if err := c.Open(ctx); err != nil { // Redfish: a session
		return nil, loginError(err)
	}
	return &bmclibController{c: c}, nil
}

// loginError is a BMC that refused bootd or did not answer its first request.
func loginError(err error) error {
	return fmt.Errorf("cannot log in (is it on the network, and are the user and the password given with `bootd power password` right?): %s", oneLine(err))
}

type bmclibController struct {
	c *bmclib.Client
	// loggingIn: no request has succeeded yet and none was a login of its own (IPMI), so a
	// failure is the login's.
	loggingIn bool
}

func (b *bmclibController) PowerState(ctx context.Context) (State, error) {
	s, err := b.c.GetPowerState(ctx)
	switch {
	case err != nil && b.loggingIn:
		return StateUnknown, loginError(err)
	case err != nil:
		return StateUnknown, errors.New(oneLine(err))
	}
	b.loggingIn = false
	return normalise(s), nil
}

func (b *bmclibController) SetPower(ctx context.Context, state string) error {
	ok, err := b.c.SetPowerState(ctx, state)
	if err != nil {
		return errors.New(oneLine(err))
	}
	if !ok {
		return errors.New("the BMC did not confirm")
	}
	return nil
}

// oneLine folds bmclib's multi-line errors (one per provider tried, ipmitool's own output) into
// one line for the log and the CLI.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

func (b *bmclibController) Close(ctx context.Context) { _ = b.c.Close(ctx) }
