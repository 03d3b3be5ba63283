package gcp_test

// methods maps the fake's name of a call (gcptest.Server.Calls: the HTTP
// method and the path's last segment, zonal and regional alike) to the
// Compute API methods it stands for.
var methods = map[string][]string{
	"GET instanceGroupManager":    {"instanceGroupManagers.get", "regionInstanceGroupManagers.get"},
	"POST listManagedInstances":   {"instanceGroupManagers.listManagedInstances", "regionInstanceGroupManagers.listManagedInstances"},
	"POST createInstances":        {"instanceGroupManagers.createInstances", "regionInstanceGroupManagers.createInstances"},
	"POST deleteInstances":        {"instanceGroupManagers.deleteInstances", "regionInstanceGroupManagers.deleteInstances"},
	"POST stopInstances":          {"instanceGroupManagers.stopInstances", "regionInstanceGroupManagers.stopInstances"},
	"POST startInstances":         {"instanceGroupManagers.startInstances", "regionInstanceGroupManagers.startInstances"},
	"POST resize":                 {"instanceGroupManagers.resize"},
	"POST instanceGroupManagers":  {"instanceGroupManagers.insert"},
	"DELETE instanceGroupManager": {"instanceGroupManagers.delete"},
	"GET instanceGroupManagers":   {"instanceGroupManagers.aggregatedList"},
	"GET operations":              {"zoneOperations.get", "regionOperations.get"},
	"GET instances":               {"instances.list"},
	"GET instanceTemplate":        {"instanceTemplates.get", "regionInstanceTemplates.get"},
}
