// Package power switches nodes on and off: through a node's BMC with bmc-toolbox's bmclib (IPMI
// through ipmitool, Redfish), or, for a PC without one, with a Wake-on-LAN magic packet sent on
// bootd's interface. bmclib is what Tinkerbell uses for the same job: it speaks the BMCs'
// protocols so that bootd does not.
package power

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// Action is what to do to a node's power.
type Action string

// The actions `bootd power` takes.
const (
	On     Action = "on"
	Off    Action = "off"    // at once, as the power button held down
	Cycle  Action = "cycle"  // off and on again; on when it is off
	Status Action = "status" // ask, change nothing
)

// ParseAction reads an action's name.
func ParseAction(s string) (Action, error) {
	switch a := Action(s); a {
	case On, Off, Cycle, Status:
		return a, nil
	}
	return "", fmt.Errorf("unknown power action %q (want on, off, cycle or status)", s)
}

// State is a node's power as its BMC reports it.
type State string

// The states a BMC reports, normalised; Unknown where there is no BMC to ask or it did not answer.
const (
	StateOn      State = "on"
	StateOff     State = "off"
	StateUnknown State = "unknown"
)

// Methods: how a node's power is switched.
const (
	MethodIPMI    = "ipmi"
	MethodRedfish = "redfish"
	MethodWoL     = "wake-on-lan"
)

// Secret is a BMC password: it prints redacted.
type Secret string

// String redacts the password.
func (Secret) String() string { return "(redacted)" }

// GoString is String, for %#v.
func (s Secret) GoString() string { return s.String() }

// BMC is how to reach a node's BMC.
type BMC struct {
	Protocol string // MethodIPMI or MethodRedfish
	Address  string // host or host:port
	User     string
	Password Secret
}

// Target is one node to act on: through its BMC, or by Wake-on-LAN to its MAC when it has none.
type Target struct {
	Node string
	MAC  net.HardwareAddr
	BMC  *BMC
	// Err is why the target cannot be reached at all (a BMC without a password): Do reports it
	// as the node's result without trying.
	Err error
}

// Method names how t is switched.
func (t Target) Method() string {
	if t.BMC != nil {
		return t.BMC.Protocol
	}
	return MethodWoL
}

// Result is what happened to one node.
type Result struct {
	Node   string `json:"node"`
	Method string `json:"method"`        // ipmi, redfish or wake-on-lan
	BMC    string `json:"bmc,omitempty"` // the BMC's address
	// State is the power as the BMC reports it after the action (unknown without a BMC).
	State State  `json:"state"`
	Done  string `json:"done,omitempty"`  // what was done: "switched on", "magic packet sent to ..."
	Error string `json:"error,omitempty"` // why it failed
	// Checked is when the state was asked.
	Checked time.Time `json:"checked"`
}

// Failed reports whether the action failed for this node.
func (r Result) Failed() bool { return r.Error != "" }

// Switch acts on nodes' power.
type Switch struct {
	// Interface is where Wake-on-LAN packets go out: bootd's lab interface.
	Interface string
	// Timeout bounds the action on one node (a BMC that does not answer); default 45 s.
	Timeout time.Duration
	// Parallel bounds how many nodes are acted on at once; default 8.
	Parallel int

	// Wake and OpenBMC are the two ways to reach a node (nil: SendMagicPacket, and bmclib);
	// tests replace them.
	Wake    func(ifname string, mac net.HardwareAddr) error
	OpenBMC func(ctx context.Context, b BMC) (Controller, error)
}

// Controller is one open connection to a BMC.
type Controller interface {
	PowerState(ctx context.Context) (State, error)
	SetPower(ctx context.Context, state string) error
	Close(ctx context.Context)
}

// NewSwitch returns a switch that wakes PCs without a BMC on ifname.
func NewSwitch(ifname string) *Switch {
	return &Switch{Interface: ifname}
}

// Do takes action on every target, several at once, and returns one result per target in
// their order. It waits for all of them (each bounded by s.Timeout) or for ctx.
func (s *Switch) Do(ctx context.Context, a Action, targets []Target) []Result {
	results := make([]Result, len(targets))
	n := s.Parallel
	if n <= 0 {
		n = 8
	}
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = s.one(ctx, a, t)
		}()
	}
	wg.Wait()
	return results
}

// one acts on one target.
func (s *Switch) one(ctx context.Context, a Action, t Target) Result {
	r := Result{Node: t.Node, Method: t.Method(), State: StateUnknown}
	if t.BMC != nil {
		r.BMC = t.BMC.Address
	}
	if t.Err != nil {
		r.Error = t.Err.Error()
		return r
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 45 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var err error
	if t.BMC == nil {
		err = s.wakeOnLAN(a, t, &r)
	} else {
		err = s.throughBMC(ctx, a, *t.BMC, &r)
	}
	if err != nil {
		r.Error = err.Error()
	}
	r.Checked = time.Now()
	return r
}

// wakeOnLAN can switch a node on and nothing else: a PC that is off has no one else to ask.
func (s *Switch) wakeOnLAN(a Action, t Target, r *Result) error {
	switch a {
	case Status:
		r.Done = "no BMC to ask"
		return nil
	case On:
		if len(t.MAC) != 6 {
			return fmt.Errorf("no Ethernet MAC to wake %s at", t.Node)
		}
		wake := s.Wake
		if wake == nil {
			wake = SendMagicPacket
		}
		if err := wake(s.Interface, t.MAC); err != nil {
			return fmt.Errorf("wake-on-lan on %s: %w", s.Interface, err)
		}
		r.Done = "magic packet sent to " + t.MAC.String()
		return nil
	}
	return fmt.Errorf("%s has no BMC ([bmc.%s] in bootd's config): Wake-on-LAN can switch it on, nothing else; "+
		"switch it off through its OS (on the master: ssh %s poweroff)", t.Node, t.Node, t.Node)
}

// throughBMC asks the node's BMC, and reads the power state back after any change.
func (s *Switch) throughBMC(ctx context.Context, a Action, b BMC, r *Result) error {
	open := s.OpenBMC
	if open == nil {
		open = openBMC
	}
	c, err := open(ctx, b)
	if err != nil {
		return fmt.Errorf("%s BMC at %s: %w", b.Protocol, b.Address, err)
	}
	defer c.Close(ctx)
	before, err := c.PowerState(ctx)
	if err != nil {
		return fmt.Errorf("%s BMC at %s: power status: %w", b.Protocol, b.Address, err)
	}
	r.State = before
	verb := map[Action]string{On: "on", Off: "off", Cycle: "cycle"}[a]
	switch {
	case a == Status:
		return nil
	case a == On && before == StateOn, a == Off && before == StateOff:
		r.Done = "was " + string(before) + " already"
		return nil
	case a == Cycle && before == StateOff:
		verb = "on" // a BMC refuses to cycle a node that is off
	}
	if err := c.SetPower(ctx, verb); err != nil {
		return fmt.Errorf("%s BMC at %s: power %s: %w", b.Protocol, b.Address, verb, err)
	}
	r.Done = map[string]string{"on": "switched on", "off": "switched off", "cycle": "power cycled"}[verb]
	if after, err := c.PowerState(ctx); err == nil {
		r.State = after
	}
	return nil
}

// normalise turns what a BMC says ("Chassis Power is on", Redfish "PoweringOff") into a State.
func normalise(s string) State {
	s = strings.ToLower(strings.TrimSpace(s))
	switch {
	case s == "on" || strings.HasSuffix(s, " is on"):
		return StateOn
	case s == "off" || strings.HasSuffix(s, " is off"):
		return StateOff
	case s == "":
		return StateUnknown
	}
	return State(s) // poweringon, poweringoff, paused: as the BMC says
}
