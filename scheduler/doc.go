// Package scheduler will hold the coordinator: peer membership, chunk
// holdings, parent selection, back-to-source coordination, bans and
// preheat. It is built by the "scheduler" issue.
package scheduler
