// SPDX-License-Identifier: Apache-2.0

package config

import "fmt"

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
