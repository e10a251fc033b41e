// Stand-in for the container callback uid-generator's generators implement; the harness
// calls it by hand, as a container would after setting the properties.
package org.springframework.beans.factory;

public interface InitializingBean {
    void afterPropertiesSet() throws Exception;
}
