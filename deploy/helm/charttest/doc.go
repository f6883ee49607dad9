// SPDX-License-Identifier: Apache-2.0

// Package charttest checks the Helm chart deploy/helm/outbox-relay and the manifests of
// deploy/kubernetes against the Kubernetes API types and against the outbox-relay binary.
//
// It is a Go module of its own so that Helm's and Kubernetes' libraries stay out of the
// relay's go.mod; `make test` runs it (docs/kubernetes.md, docs/decisions.md).
package charttest
