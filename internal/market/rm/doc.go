// Package rm is the resource manager: it asks a policy which machines to
// hold, gets them from a provider, and tells the policy what happened to
// them.
package rm
