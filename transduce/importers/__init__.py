"""Models of other toolkits as transduce run directories."""
