package config

import (
	"errors"
	"fmt"
	"reflect"
)

// Validate checks every key of c and reports all invalid ones, each as
// "config: KEY: problem"; then, if every key is valid, the rules over
// several keys of each section. Load already checks each value where it
// is read; Validate is for configurations built in code, and a last guard
// in Load.
func (c *Config) Validate() error {
	var errs []error
	for _, f := range fields() {
		if err := f.checkIn(c); err != nil {
			errs = append(errs, fmt.Errorf("config: %s: %w", f.key, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, s := range sections() {
		v := reflect.ValueOf(c).Elem().FieldByIndex(s.index).Interface().(validator)
		if err := v.CheckKeys(); err != nil {
			errs = append(errs, fmt.Errorf("config: %s%w", s.prefix, err))
		}
	}
	return errors.Join(errs...)
}
