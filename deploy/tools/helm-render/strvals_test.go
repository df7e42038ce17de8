package main

import (
	"encoding/json"
	"testing"
)

// Pins Helm's strvals parsing and typing (pkg/strvals typedVal): integers
// become int64 unless they start with 0, true/false are bools, null is nil,
// floats stay strings; backslash escapes keep '.' and ',' literal.
func TestParseSet(t *testing.T) {
	cases := []struct{ in, want string }{
		{"a=1,b=two", `{"a":1,"b":"two"}`},
		{"a.b.c=true", `{"a":{"b":{"c":true}}}`},
		{"a=null", `{"a":null}`},
		{"a=0,b=0123,c=1.5,d=FALSE", `{"a":0,"b":"0123","c":"1.5","d":false}`},
		{"list={x,2,true}", `{"list":["x",2,true]}`},
		{"empty={}", `{"empty":[]}`},
		{"l[1].n=v", `{"l":[null,{"n":"v"}]}`},
		{"l[0]=a,l[2]=c", `{"l":["a",null,"c"]}`},
		{`nodeSelector.kubernetes\.io/os=linux`, `{"nodeSelector":{"kubernetes.io/os":"linux"}}`},
		{`msg=a\,b`, `{"msg":"a,b"}`},
		{"url=http://x/?a=b", `{"url":"http://x/?a=b"}`},
		{"s=", `{"s":""}`},
	}
	for _, c := range cases {
		m := map[string]interface{}{}
		if err := parseSetInto(c.in, m); err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		b, _ := json.Marshal(m)
		if string(b) != c.want {
			t.Errorf("%s: got %s, want %s", c.in, b, c.want)
		}
	}
	for _, bad := range []string{"novalue", "a[x]=1", "[0]=1", "l[70000]=1"} {
		if err := parseSetInto(bad, map[string]interface{}{}); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
}

// Pins Helm's coalescing: a later --set/-f value replaces a list wholesale
// (lists are never merged), maps merge, a user null deletes the default.
func TestCoalesce(t *testing.T) {
	defaults := map[string]interface{}{
		"list": []interface{}{"a", "b"},
		"m":    map[string]interface{}{"x": 1.0, "y": 2.0},
		"gone": map[string]interface{}{"z": 1.0},
	}
	user := map[string]interface{}{}
	user = mergeMaps(user, map[string]interface{}{"m": map[string]interface{}{"y": 3.0}, "gone": nil})
	if err := parseSetInto("list={c}", user); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(coalesce(user, deepCopy(defaults).(map[string]interface{})))
	if want := `{"list":["c"],"m":{"x":1,"y":3}}`; string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
