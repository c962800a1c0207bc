package sharedtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard/fleet"
)

// RunJobs runs the suite of fleet.JobStore. newStore returns an empty store
// each time it is called, cleaned up by t.
func RunJobs(t *testing.T, newStore func(t *testing.T) fleet.JobStore) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, fleet.JobStore)
	}{
		{"PutReplacesListDrops", putReplacesListDrops},
		{"ProjectsApart", jobProjectsApart},
		{"CappedPerProject", jobsCappedPerProject},
		{"ExpiredLeftOut", expiredJobsLeftOut},
		{"JobsCancelledContext", jobsCancelledContext},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

// jobName and jobHandle are the i-th job of the job tests.
func jobName(i int) string { return fmt.Sprintf("batches/job-%d", i) }

func jobHandle(i int) []byte {
	return []byte(fmt.Sprintf(`{"version":1,"first":"gemini-3.5-flash","jobs":[{"name":%q}],"n":%d}`, jobName(i), i))
}

func putJob(t *testing.T, s fleet.JobStore, project string, i int, ttl time.Duration) {
	t.Helper()
	require.NoError(t, s.PutJob(context.Background(), project, jobName(i), jobHandle(i), ttl))
}

func jobs(t *testing.T, s fleet.JobStore, project string) []fleet.StoredJob {
	t.Helper()
	got, err := s.Jobs(context.Background(), project)
	require.NoError(t, err)
	return got
}

// names returns the names of got, in order.
func names(got []fleet.StoredJob) []string {
	out := make([]string, len(got))
	for i, j := range got {
		out[i] = j.Name
	}
	return out
}

func putReplacesListDrops(t *testing.T, s fleet.JobStore) {
	assert.Empty(t, jobs(t, s, project))
	putJob(t, s, project, 0, time.Hour)
	putJob(t, s, project, 1, 2*time.Hour)
	got := jobs(t, s, project)
	require.Len(t, got, 2)
	for i, j := range got {
		assert.Equal(t, jobName(i), j.Name)
		assert.Equal(t, jobHandle(i), j.Handle)
		assert.WithinDuration(t, time.Now().Add(time.Duration(i+1)*time.Hour), j.Expires, slack)
	}

	updated := []byte(`{"version":1,"jobs":[{"name":"batches/job-0"},{"name":"batches/job-9"}]}`)
	require.NoError(t, s.PutJob(context.Background(), project, jobName(0), updated, 3*time.Hour))
	got = jobs(t, s, project)
	require.Len(t, got, 2, "a put of the same name replaces")
	assert.Equal(t, []string{jobName(1), jobName(0)}, names(got), "the one that expires first first")
	assert.Equal(t, updated, got[1].Handle)
	assert.WithinDuration(t, time.Now().Add(3*time.Hour), got[1].Expires, slack)

	require.NoError(t, s.DropJob(context.Background(), project, jobName(0)))
	require.NoError(t, s.DropJob(context.Background(), project, "batches/none"), "none is no error")
	assert.Equal(t, []string{jobName(1)}, names(jobs(t, s, project)))
	require.NoError(t, s.DropJob(context.Background(), project, jobName(1)))
	assert.Empty(t, jobs(t, s, project))
}

func jobProjectsApart(t *testing.T, s fleet.JobStore) {
	putJob(t, s, project, 0, time.Hour)
	putJob(t, s, "p-other", 1, time.Hour)
	assert.Equal(t, []string{jobName(0)}, names(jobs(t, s, project)))
	assert.Equal(t, []string{jobName(1)}, names(jobs(t, s, "p-other")))
	require.NoError(t, s.DropJob(context.Background(), "p-other", jobName(0)), "another project's name")
	assert.Len(t, jobs(t, s, project), 1, "not dropped by another project")
}

func jobsCappedPerProject(t *testing.T, s fleet.JobStore) {
	const extra = 3
	for i := range fleet.MaxJobs + extra {
		putJob(t, s, project, i, time.Hour+time.Duration(i)*time.Second) // later puts expire later, whatever the clock's grain
	}
	putJob(t, s, "p-other", 0, time.Hour)
	got := jobs(t, s, project)
	require.Len(t, got, fleet.MaxJobs)
	assert.Equal(t, jobName(extra), got[0].Name, "the ones that expire first dropped")
	assert.Equal(t, jobName(fleet.MaxJobs+extra-1), got[len(got)-1].Name)
	assert.Len(t, jobs(t, s, "p-other"), 1, "the cap is per project")
}

func expiredJobsLeftOut(t *testing.T, s fleet.JobStore) {
	putJob(t, s, project, 0, time.Millisecond)
	putJob(t, s, project, 1, time.Hour)
	require.Eventually(t, func() bool {
		got := jobs(t, s, project)
		return len(got) == 1 && got[0].Name == jobName(1)
	}, slack, time.Millisecond, "the expired job left out")
}

func jobsCancelledContext(t *testing.T, s fleet.JobStore) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.PutJob(ctx, project, jobName(0), jobHandle(0), time.Hour), context.Canceled)
	_, err := s.Jobs(ctx, project)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, s.DropJob(ctx, project, jobName(0)), context.Canceled)
	assert.Empty(t, jobs(t, s, project), "nothing put")
}
