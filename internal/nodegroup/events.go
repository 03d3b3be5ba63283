package nodegroup

// events forwards the core's Events to the configured sink, if any.
type events struct {
	sink EventSink
}

func (e *events) warn(group, instance, providerID, reason, message string) {
	e.emit(Event{Type: "Warning", Reason: reason, Message: message, Group: group, Instance: instance, ProviderID: providerID})
}

func (e *events) normal(group, instance, providerID, reason, message string) {
	e.emit(Event{Type: "Normal", Reason: reason, Message: message, Group: group, Instance: instance, ProviderID: providerID})
}

func (e *events) emit(ev Event) {
	if e != nil && e.sink != nil {
		e.sink.Event(ev)
	}
}
