// Command lincheck checks that a history of operations on one shared
// counter is linearizable, with Porcupine (github.com/anishathalye/porcupine),
// a checker written outside this project: Stead's tests record what their
// clients did (safe increments and quorum reads, each with the time it was
// called and the time it returned) and this program judges it.
//
//	go run ./tools/lincheck history.json
//
// The history is JSON: {"operations": [{"client": 0, "kind": "add"|"read",
// "value": n, "call": t0, "return": t1}, ...]} with times in microseconds.
// An add whose outcome was never known has "return": null: it may have
// happened at any time after its call. Exit status 0: linearizable; 1: not
// (a visualization is written beside the history); 2: bad input.
package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

type operation struct {
	Client int    `json:"client"`
	Kind   string `json:"kind"`
	Value  int64  `json:"value"`
	Call   int64  `json:"call"`
	Return *int64 `json:"return"`
}

type history struct {
	Operations []operation `json:"operations"`
}

type input struct {
	add   bool
	value int64
}

// A counter: an add moves it by its value, a read returns it.
var counter = porcupine.Model{
	Init: func() interface{} { return int64(0) },
	Step: func(state, in, out interface{}) (bool, interface{}) {
		s := state.(int64)
		i := in.(input)
		if i.add {
			return true, s + i.value
		}
		return out.(int64) == s, s
	},
	Equal: func(a, b interface{}) bool { return a.(int64) == b.(int64) },
	DescribeOperation: func(in, out interface{}) string {
		i := in.(input)
		if i.add {
			return fmt.Sprintf("add(%d)", i.value)
		}
		return fmt.Sprintf("read() -> %d", out.(int64))
	},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: lincheck <history.json>")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var h history
	if err := json.Unmarshal(raw, &h); err != nil {
		fmt.Fprintln(os.Stderr, "not a history:", err)
		os.Exit(2)
	}
	ops := make([]porcupine.Operation, 0, len(h.Operations))
	adds, reads, open := 0, 0, 0
	for i, o := range h.Operations {
		ret := int64(math.MaxInt64)
		if o.Return != nil {
			ret = *o.Return
		} else if o.Kind == "read" {
			// A read that never returned says nothing.
			continue
		} else {
			open++
		}
		if ret < o.Call {
			fmt.Fprintf(os.Stderr, "operation %d returns before it is called\n", i)
			os.Exit(2)
		}
		switch o.Kind {
		case "add":
			adds++
			ops = append(ops, porcupine.Operation{ClientId: o.Client, Input: input{add: true, value: o.Value}, Call: o.Call, Output: int64(0), Return: ret})
		case "read":
			reads++
			ops = append(ops, porcupine.Operation{ClientId: o.Client, Input: input{}, Call: o.Call, Output: o.Value, Return: ret})
		default:
			fmt.Fprintf(os.Stderr, "operation %d: unknown kind %q\n", i, o.Kind)
			os.Exit(2)
		}
	}
	result, info := porcupine.CheckOperationsVerbose(counter, ops, 5*time.Minute)
	fmt.Printf("%d adds (%d without a known outcome), %d reads: %s\n", adds, open, reads, result)
	switch result {
	case porcupine.Ok:
		os.Exit(0)
	case porcupine.Illegal:
		out := os.Args[1] + ".html"
		if f, err := os.Create(out); err == nil {
			_ = porcupine.Visualize(counter, info, f)
			f.Close()
			fmt.Println("not linearizable; see", out)
		}
		os.Exit(1)
	default:
		fmt.Println("the check ran out of time")
		os.Exit(1)
	}
}
