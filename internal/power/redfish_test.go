package power

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// redfishBoard is the smallest Redfish service bmclib's gofish provider talks to: a service
// root, sessions, one system with its power state and reset action. Debian packages no Redfish
// emulator, so this checks bootd's side of the protocol (the provider chosen, the port, the
// credentials, the reset types asked, the state read back) against what bmclib sends, on
// loopback; the IPMI path is checked against the real ipmi_sim in e2e/power_test.go.
type redfishBoard struct {
	mu     sync.Mutex
	state  string   // "On" or "Off"
	resets []string // ResetTypes asked
	logins int
}

const redfishToken = "token-1"

func (b *redfishBoard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	if r.URL.Path != "/redfish/v1/" && r.URL.Path != "/redfish/v1" && !(r.Method == http.MethodPost && r.URL.Path == "/redfish/v1/SessionService/Sessions") &&
		r.Header.Get("X-Auth-Token") != redfishToken {
		reply(http.StatusUnauthorized, map[string]string{"error": "no session"})
		return
	}
	switch {
	case r.URL.Path == "/redfish/v1/" || r.URL.Path == "/redfish/v1":
		reply(200, map[string]any{"@odata.id": "/redfish/v1/", "Id": "RootService", "RedfishVersion": "1.6.0",
			"Systems":        map[string]string{"@odata.id": "/redfish/v1/Systems"},
			"SessionService": map[string]string{"@odata.id": "/redfish/v1/SessionService"},
			"Links":          map[string]any{"Sessions": map[string]string{"@odata.id": "/redfish/v1/SessionService/Sessions"}}})
	case r.Method == http.MethodPost && r.URL.Path == "/redfish/v1/SessionService/Sessions":
		var login struct{ UserName, Password string }
		_ = json.NewDecoder(r.Body).Decode(&login)
		if login.UserName != "root" || login.Password != "calvin" {
			reply(http.StatusUnauthorized, map[string]string{"error": "bad credentials"})
			return
		}
		b.logins++
		w.Header().Set("X-Auth-Token", redfishToken)
		w.Header().Set("Location", "/redfish/v1/SessionService/Sessions/1")
		reply(http.StatusCreated, map[string]string{"@odata.id": "/redfish/v1/SessionService/Sessions/1", "Id": "1"})
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/redfish/v1/Systems":
		reply(200, map[string]any{"@odata.id": "/redfish/v1/Systems", "Members@odata.count": 1,
			"Members": []map[string]string{{"@odata.id": "/redfish/v1/Systems/1"}}})
	case r.URL.Path == "/redfish/v1/Systems/1":
		reply(200, map[string]any{"@odata.id": "/redfish/v1/Systems/1", "Id": "1", "Name": "c2", "PowerState": b.state,
			"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{"target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
				"ResetType@Redfish.AllowableValues": []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle"}}}})
	case r.Method == http.MethodPost && r.URL.Path == "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset":
		var req struct{ ResetType string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		b.resets = append(b.resets, req.ResetType)
		switch req.ResetType {
		case "On", "ForceRestart", "PowerCycle":
			b.state = "On"
		case "ForceOff", "GracefulShutdown":
			b.state = "Off"
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		reply(http.StatusNotFound, map[string]string{"error": r.Method + " " + r.URL.Path})
	}
}

func TestRedfish(t *testing.T) {
	board := &redfishBoard{state: "Off"}
	srv := httptest.NewTLSServer(board)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "https://") // 127.0.0.1:PORT: the port goes to bmclib's Redfish provider
	target := Target{Node: "c2", BMC: &BMC{Protocol: MethodRedfish, Address: addr, User: "root", Password: "calvin"}}
	s := NewSwitch("lo")
	for _, tt := range []struct {
		action    Action
		wantState State
		wantDone  string
		wantReset string
	}{
		{Status, StateOff, "", ""},
		{On, StateOn, "switched on", "On"},
		{Off, StateOff, "switched off", "ForceOff"},
	} {
		t.Run(string(tt.action), func(t *testing.T) {
			r := s.Do(context.Background(), tt.action, []Target{target})[0]
			if r.Failed() || r.State != tt.wantState || r.Done != tt.wantDone {
				t.Fatalf("%+v, want state %s, done %q", r, tt.wantState, tt.wantDone)
			}
			board.mu.Lock()
			defer board.mu.Unlock()
			last := ""
			if len(board.resets) > 0 {
				last = board.resets[len(board.resets)-1]
			}
			if tt.wantReset != "" && last != tt.wantReset {
				t.Fatalf("the service was asked %q, want %s last", board.resets, tt.wantReset)
			}
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		wrong := target
		wrong.BMC = &BMC{Protocol: MethodRedfish, Address: addr, User: "root", Password: "guess"}
		r := s.Do(context.Background(), On, []Target{wrong})[0]
		if !r.Failed() || !strings.Contains(r.Error, "cannot log in") || strings.Contains(r.Error, "guess") {
			t.Fatalf("%+v: want a failure to log in that does not show the password", r)
		}
	})
}
