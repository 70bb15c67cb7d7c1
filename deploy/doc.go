// Package deploy holds no code: its tests check the deployment files beside
// it (deploy/docker, deploy/kustomize) offline. See README.md.
package deploy
